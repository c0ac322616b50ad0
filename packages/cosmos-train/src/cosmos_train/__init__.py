"""cosmos-train: post-training for Cosmos3 world models and the diffusion and vision-language
models trained beside them, on TRL, Accelerate and diffusers."""

__version__ = "0.1.0"
