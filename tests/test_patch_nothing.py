"""integrations.transformers.patch() on a model it has nothing to patch in (a dense model, a
single layer, a model patched already): an empty report that says why, and a warning."""
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the transformers package "
                                   "(the models patched): pip install transformers")

from test_transformers import COMMON, tiny_model  # noqa: E402
from torch_argon.integrations import transformers as argon_hf  # noqa: E402


def patch_warning(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = argon_hf.patch(model)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1, messages
    return report, messages[0]


def test_a_dense_model():
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON,
                                                                    intermediate_size=32))
    report, message = patch_warning(model)
    assert report == [] and report.skipped == {}
    assert report.nothing_to_patch.startswith("LlamaForCausalLM has no sparse MoE block of a "
                                              "supported class (")
    assert "Qwen3MoeSparseMoeBlock" in report.nothing_to_patch
    assert message == f"torch_argon patched 0 MoE block(s): {report.nothing_to_patch}"
    assert "nothing_to_patch=" in repr(report)


def test_a_module_that_is_no_model():
    report, message = patch_warning(torch.nn.Linear(4, 4))
    assert report == [] and report.nothing_to_patch.startswith("Linear has no sparse MoE block")
    assert report.nothing_to_patch in message


def test_a_model_patched_already():
    model = tiny_model("qwen3_moe")
    assert argon_hf.patch(model) == ["model.layers.0.mlp", "model.layers.1.mlp"]
    report, message = patch_warning(model)
    assert report == []
    assert report.nothing_to_patch == ("its 2 MoE block(s) are patched already "
                                       "(model.layers.0.mlp, model.layers.1.mlp)")
    assert report.nothing_to_patch in message


def test_a_model_with_blocks_to_patch_says_nothing_more():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = argon_hf.patch(tiny_model("mixtral"))
    assert len(report) == 2 and report.nothing_to_patch == ""
