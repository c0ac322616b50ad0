import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

import transformers_cosmos3


def test_native_classes_stay_and_the_shim_loads_into_them():
    """transformers >= 5.11 (the declared floor) ships cosmos3_omni; the shim registers nothing."""
    config = AutoConfig.for_model("cosmos3_omni")
    assert type(config) is transformers.Cosmos3OmniConfig
    model_class = AutoModelForImageTextToText._model_mapping[type(config)]
    assert model_class is transformers.Cosmos3OmniForConditionalGeneration
    assert type(AutoConfig.for_model("cosmos3_edge")) is transformers.Cosmos3EdgeConfig
    assert issubclass(
        transformers_cosmos3.Cosmos3ForConditionalGeneration, transformers.Cosmos3OmniForConditionalGeneration
    )
