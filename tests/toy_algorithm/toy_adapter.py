"""A model adapter outside cosmos-train, named in a job by `[model] adapter = "toy_algorithm.toy_adapter:..."`."""

from cosmos_train.diffusion.families.sd3 import StableDiffusion3Adapter


class CountingSD3Adapter(StableDiffusion3Adapter):
    """SD3's adapter, counting the prompts it encodes."""

    prompts_encoded = 0

    def encode_prompts(self, prompts):
        self.prompts_encoded += len(prompts)
        return super().encode_prompts(prompts)
