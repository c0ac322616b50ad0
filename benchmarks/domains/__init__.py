"""The benchmarks' toy domains, beside the scripts that run them; not part of the cosmos-train package.

- `geneval_mini/`: GenEval in miniature (docs/geneval-mini.md), for `geneval_mini.py` and `geneval_mini_guidance.py`;
- `arithmetic/`: GRPO's task with one right answer (docs/grpo-math.md), for `grpo_math.py`;
- `checksums.py`: the SHA-256 sums of the shipped base models (`geneval_mini/base/`, `grpo_math/base/`).

Imported as `domains.<name>` with `benchmarks/` on `sys.path`: a benchmark script has it (its own folder), its
child processes get it through `PYTHONPATH` (`_common.run_job`), and the tests through pytest's `pythonpath`.
Jobs name the GenEval-mini rewards by import path, `"domains.geneval_mini.evaluator:geneval_mini"`.
"""
