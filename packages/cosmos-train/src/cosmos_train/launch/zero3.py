"""DeepSpeed ZeRO-3 for what transformers' own integration does not cover: models built outside
`deepspeed.zero.Init` (the diffusers transformers), and tensors kept beside a partitioned model.

Under ZeRO-3 each parameter `p` keeps only its rank's slice of the flattened (padded) tensor, `p.ds_tensor`; a
forward gathers the slices of each layer it reaches and releases them afterwards, except for the small
*persistent* parameters, which stay gathered. Every function here that gathers is a collective: every process
must call it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch


def zero3_enabled() -> bool:
    """Whether the Trainer's DeepSpeed config (alive while its TrainingArguments are) is ZeRO stage 3."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def init_deepspeed_comm() -> None:
    """ZeRO-3 partitions over DeepSpeed's own comm layer. Accelerate sets that up on GPUs; a CPU run (`use_cpu`)
    only gets torch's gloo process group, which DeepSpeed adopts here. A no-op when already set up or not
    distributed."""
    if zero3_enabled() and torch.distributed.is_available() and torch.distributed.is_initialized():
        import deepspeed

        if not deepspeed.comm.is_initialized():
            deepspeed.init_distributed()


def fill_width_keys(hf_deepspeed_config, width: int) -> None:
    """Fill the DeepSpeed keys that transformers sizes from `config.hidden_size` (which diffusers models lack) from
    the model's width, with transformers' own rules; keys the user set stay."""
    hf_deepspeed_config.fill_only("zero_optimization.reduce_bucket_size", width * width)
    hf_deepspeed_config.fill_only("zero_optimization.stage3_prefetch_bucket_size", int(0.9 * width * width))
    hf_deepspeed_config.fill_only("zero_optimization.stage3_param_persistence_threshold", 10 * width)


def partition(module: torch.nn.Module, deepspeed_config: dict) -> None:
    """Partition a module built whole, in place, as `deepspeed.initialize` would later: its parameters first cast
    to the config's 16-bit dtype when it has one (the engine casts only modules it partitions itself), so that
    copies of its parameters can be made partitioned too."""
    import deepspeed

    dtype = None
    if (deepspeed_config.get("bf16") or {}).get("enabled") is True:
        dtype = torch.bfloat16
    elif (deepspeed_config.get("fp16") or {}).get("enabled") is True:
        dtype = torch.float16
    if dtype is not None:
        for parameter in module.parameters():
            if parameter.is_floating_point():
                parameter.data = parameter.data.to(dtype)
    init_deepspeed_comm()
    deepspeed.zero.Init(module=module, config_dict_or_path=deepspeed_config)


def is_partitioned(parameter: torch.Tensor) -> bool:
    return hasattr(parameter, "ds_tensor")


def local_part(parameter: torch.Tensor) -> torch.Tensor:
    """What this process holds of a parameter: its ZeRO-3 slice, or the whole tensor."""
    return parameter.ds_tensor if is_partitioned(parameter) else parameter


def held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes this process holds of `tensors` (of a partitioned parameter, its slice)."""
    held = [local_part(t) for t in tensors]
    return sum(t.numel() * t.element_size() for t in held)


def regather_persistent(parameters: Iterable[torch.Tensor]) -> None:
    """After the slices of `parameters` changed in place, the persistent ones (kept gathered between forwards)
    gather the new slices; the others gather at their next forward anyway."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    persistent = [p for p in parameters if getattr(p, "ds_persist", False)]
    if persistent:
        if any(p.ds_status == ZeroParamStatus.AVAILABLE for p in persistent):
            persistent[0].partition(param_list=persistent)  # frees the stale gathered tensors
        persistent[0].all_gather(param_list=persistent)


@contextlib.contextmanager
def whole_on_main_process(module: torch.nn.Module) -> Iterator[None]:
    """For the block, the main process's copy of a ZeRO-3 module holds its whole parameters (gathered one layer at
    a time, on the CPU), so `save_pretrained` and state dicts see them; the others keep their slices. Gathers
    nothing when the module is not partitioned."""
    parameters = [p for p in module.parameters() if is_partitioned(p)]
    if not parameters:
        yield
        return
    import deepspeed

    main = torch.distributed.get_rank() == 0
    whole: dict[int, torch.Tensor] = {}
    for submodule in module.modules():
        own = [p for p in submodule.parameters(recurse=False) if is_partitioned(p)]
        if not own:
            continue
        with deepspeed.zero.GatheredParameters(own, modifier_rank=None):
            if main:
                whole.update({id(p): p.detach().cpu().clone() for p in own})
    kept = {id(p): p.data for p in parameters}
    if main:
        for p in parameters:
            p.data = whole[id(p)]
    try:
        yield
    finally:
        for p in parameters:
            p.data = kept[id(p)]
