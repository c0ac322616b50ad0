"""A `cosmos-train export` of the Cosmos3 reasoner, full or LoRA-merged, is served by vLLM as it is.

The export is made by the main environment's `cosmos-train` (SFT + export need TRL and PEFT, which the
vLLM environment does not have); vLLM then loads the folder as a user would, with no overrides, and
its greedy tokens must equal transformers' on the same folder.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

import torch
from vllm_helpers import NEW_TOKENS, PROMPTS, transformers_greedy

ROOT = Path(__file__).resolve().parents[2]
MAIN_ENV_BIN = ROOT / ".venv" / "bin"


def _main_env(*args: str, cwd: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{"full": folder, "merged": folder}: exports of a tiny reasoner and of a LoRA SFT run on it."""
    if not (MAIN_ENV_BIN / "cosmos-train").is_file():
        pytest.skip(f"the main environment is not built ({MAIN_ENV_BIN}); run scripts/setup.sh")
    root = tmp_path_factory.mktemp("cosmos3-export")
    # vLLM's CPU attention takes head sizes of 32 and up; the default tiny reasoner has 16.
    _main_env(
        str(MAIN_ENV_BIN / "python"),
        "-c",
        "import dataclasses\nimport sys\n"
        "from transformers_cosmos3.testing import TINY, save_tiny_cosmos3_reasoner\n"
        "sizes = dataclasses.replace(TINY, head_dim=32, mrope_section=(8, 4, 4))\n"
        "save_tiny_cosmos3_reasoner(sys.argv[1], sizes=sizes)\n",
        str(root / "reasoner"),
        cwd=root,
    )
    shapes = ROOT / "examples" / "data" / "shapes"
    _main_env(
        str(MAIN_ENV_BIN / "cosmos-train"),
        "sft",
        "-c",
        str(ROOT / "examples" / "sft" / "tiny_cosmos3_lora.toml"),
        "--set",
        f"model.name_or_path={root / 'reasoner'}",
        "--set",
        f"data.path={shapes / 'llava.json'}",
        "--set",
        f"data.media_dir={shapes}",
        "--set",
        f"train.output_dir={root / 'run'}",
        "--set",
        "train.max_steps=4",
        "--set",
        "train.save_steps=4",
        cwd=root,
    )
    cli = str(MAIN_ENV_BIN / "cosmos-train")
    _main_env(cli, "export", str(root / "run"), str(root / "merged"), "--merge-lora", cwd=root)
    _main_env(cli, "export", str(root / "reasoner"), str(root / "full"), cwd=root)
    return {"full": root / "full", "merged": root / "merged"}


@pytest.mark.parametrize("kind", ["full", "merged"])
def test_export_names_a_class_vllm_serves_from_its_layout(exports, kind):
    """transformers' own name, which vllm-cosmos3 serves from any layout.

    Not vLLM's native `Cosmos3ForConditionalGeneration`: that class reads only the diffusers export
    layout, and finds no weights in a transformers-layout folder.
    """
    from transformers import Cosmos3OmniForConditionalGeneration
    from vllm import ModelRegistry
    from vllm.config import ModelConfig
    from vllm.plugins import load_general_plugins

    from vllm_cosmos3.model import Cosmos3AnyLayoutForConditionalGeneration

    load_general_plugins()  # as vLLM does when it starts
    architectures = json.loads((exports[kind] / "config.json").read_text())["architectures"]
    assert architectures == [Cosmos3OmniForConditionalGeneration.__name__]
    model_config = ModelConfig(model=str(exports[kind]), dtype="float32", max_model_len=256)
    resolved, _ = ModelRegistry.resolve_model_cls(architectures, model_config)
    assert resolved is Cosmos3AnyLayoutForConditionalGeneration


@pytest.mark.parametrize("kind", ["full", "merged"])
def test_vllm_serves_the_export_like_transformers(exports, kind):
    from transformers import AutoModelForImageTextToText, AutoTokenizer
    from vllm import LLM, SamplingParams

    folder = exports[kind]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = [tokenizer(prompt).input_ids for prompt in PROMPTS]
    expected = []
    for ids in prompts:
        tokens, gap = transformers_greedy(model, ids)
        assert gap > 1e-4, f"near-tie in the reference ({gap}); pick other prompts"
        expected.append(tokens)

    # No hf_overrides: the export's own config.json picks the class.
    llm = LLM(
        model=str(folder),
        dtype="float32",
        max_model_len=256,
        max_num_seqs=4,
        enforce_eager=True,
        limit_mm_per_prompt={"image": 0, "video": 0},
        seed=0,
    )
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    assert [list(output.outputs[0].token_ids) for output in outputs] == expected
    del llm


def test_merged_export_differs_from_the_base(exports):
    """The LoRA merge changed weights, so the merged comparison above is not the base model twice."""
    from safetensors.torch import load_file

    full = load_file(exports["full"] / "model.safetensors")
    merged = load_file(exports["merged"] / "model.safetensors")
    assert full.keys() == merged.keys()
    assert any(not torch.equal(full[name], merged[name]) for name in full)
