"""One folder per algorithm: `schema.py` (its job file, and the TRL / transformers config it maps onto), `trainer.py`
(the trainer and its run function) and, where it has math of its own, `loss.py` (plain functions checked against
its reference). `diffusion/` and `diffusion_rl/` are the bases the diffusion kinds share; `common.py` is the run
skeleton every kind shares. `cosmos_train.kinds` registers each algorithm once."""
