"""The toy algorithm: samples by the current policy (Euler, no CFG), then flow matching towards each sample,
weighted by its group-normalised advantage: samples better than their group are pulled closer, worse ones
pushed away."""

import torch

from cosmos_train.algorithms.diffusion_rl.trainer import DiffusionRLTrainer
from cosmos_train.diffusion.flow import add_noise
from cosmos_train.diffusion.sampling import ode_sample


class ToyTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, config, lora=None, **kwargs):
        super().__init__(adapter, rewards, config, lora=lora, **kwargs)
        self.timesteps = config.train_timesteps()

    def rollout(self, prompts, metadata, batch):
        conditioning = self.conditioning(prompts)
        grid = self.grid(self.rollout_config.sampling_steps)
        x0 = ode_sample(
            self.adapter, self.adapter.transformer, self.noise(len(prompts)), conditioning, grid, "euler"
        )
        return {"latents_for_reward": x0, "x0": x0, "conditioning": conditioning}

    def micro_batches(self, rollout):
        batches = []
        for index in self.sample_chunks(rollout["x0"].shape[0]):
            for _ in range(self.timesteps):
                x0 = rollout["x0"][index]
                batches.append(
                    {
                        "x0": x0,
                        "noise": torch.randn_like(x0),
                        "sigmas": torch.rand(x0.shape[0]),
                        "advantages": rollout["advantages"][index],
                        "conditioning": {k: v[index] for k, v in rollout["conditioning"].items()},
                    }
                )
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        x0, noise, sigmas = inputs["x0"], inputs["noise"], inputs["sigmas"]
        prediction = self.adapter.predict_velocity(
            model, add_noise(x0, noise, sigmas), sigmas, inputs["conditioning"]
        )
        per_sample = ((prediction.float() - (noise - x0)) ** 2).mean(dim=tuple(range(1, x0.dim())))
        loss = (inputs["advantages"].clamp(-1, 1) * per_sample).mean()
        return (loss, None) if return_outputs else loss
