"""A toy diffusion RL algorithm, written as a user would add one: its config file, its trainer file, and one
registry entry (`TOY_KIND`), registered with `cosmos_train.kinds.register`, named by a job file's
`kind = "toy_algorithm:TOY_KIND"`, or declared as a `cosmos_train.kinds` entry point."""

from cosmos_train.kinds import JobKind

TOY_KIND = JobKind(
    "toy-rl",
    schema="toy_algorithm.toy_config:ToyJob",
    run="cosmos_train.algorithms.diffusion_rl.trainer:run_diffusion_rl",
    trainer="toy_algorithm.toy_trainer:ToyTrainer",
    family="diffusion",
    help="""Toy RL: reward-weighted flow matching on the policy's own samples.

Example:

  cosmos-train toy-rl -c job.toml
""",
)
