"""torch_argon.integrations.transformers on tiny randomly initialised models (no downloads):
each supported family in the installed transformers is patched, its logits compared with the
unpatched model, generate() run, and unpatched again.

Tolerances (max |patched - original| / max |original|, logits): fp32 1e-5; bf16 3e-2, since
the original rounds its expert outputs and routing weights to bf16 at other points than the
argon combine does (fp32 accumulation, one rounding), and the difference goes through every
later layer. Measured: fp32 <= 4e-7; bf16 0.8e-2 to 1.2e-2, the order by which transformers'
own eager and grouped_mm expert paths differ from each other (0.6e-2 to 0.8e-2).
"""
import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install torch_argon[transformers])")

from torch_argon.integrations import transformers as argon_hf  # noqa: E402
from torch_argon.layer import moe_experts  # noqa: E402
from torch_argon.nn import MoE  # noqa: E402

VOCAB, H = 128, 64
COMMON = dict(vocab_size=VOCAB, hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.1,
              pad_token_id=0, eos_token_id=1, bos_token_id=2)
# family: (config class, model class, config kwargs). E=8 experts, width 32, top-2/3.
FAMILIES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_experts=8,
        num_experts_per_tok=3, norm_topk_prob=True)),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_experts=8,
        num_experts_per_tok=3, norm_topk_prob=True, shared_expert_intermediate_size=48,
        layer_types=["linear_attention", "full_attention"], linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        intermediate_size=96, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=3,
        shared_expert_intermediate_size=48)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(
        head_dim=16, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        intermediate_size=32, num_experts=8, num_experts_per_tok=3)),
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def tiny_model(family, dtype=torch.float32, **overrides):
    config_cls, model_cls, kwargs = FAMILIES[family]
    if not hasattr(transformers, model_cls):
        pytest.skip(f"{model_cls} is not in transformers {transformers.__version__}")
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**COMMON, **{**kwargs, **overrides})
    return getattr(transformers, model_cls)(config).to(dtype).eval()


def inputs(batch=2, length=11):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding in the second row
    return ids, mask


def rel_err(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_logits_match_and_generate_runs(family, dtype):
    model = tiny_model(family, dtype)
    ids, mask = inputs()
    params = {k: v.data_ptr() for k, v in model.state_dict().items()}
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits
        ref_tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4,
                                    do_sample=False)

        names = argon_hf.patch(model)
        assert names == [f"model.layers.{i}.mlp" for i in range(2)]
        assert all(isinstance(model.get_submodule(n), MoE) for n in names)
        # same parameters under the same names: nothing copied, checkpoints load as before
        assert {k: v.data_ptr() for k, v in model.state_dict().items()} == params
        out = model(input_ids=ids, attention_mask=mask).logits
        assert rel_err(out, ref) <= TOL[dtype], f"{family} {dtype}: {rel_err(out, ref):.3g}"
        tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4,
                                do_sample=False)
        assert tokens.shape == ref_tokens.shape
        if dtype == torch.float32:  # greedy decoding agrees when the logits do this closely
            assert torch.equal(tokens, ref_tokens)

        assert argon_hf.unpatch(model) == names
        assert not argon_hf.is_patched(model)
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, ref)


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_block_matches_original_block(family):
    """Block level, on activations of a realistic size: the comparison the logits dilute."""
    model = tiny_model(family)
    block = model.get_submodule("model.layers.0.mlp")
    ours = argon_hf.to_argon(block)
    x = torch.randn(3, 17, H)
    with torch.no_grad():
        ref = block(x)
        out = ours(x)
    assert type(out) is type(ref) and out.shape == ref.shape
    assert rel_err(out, ref) <= TOL[torch.float32]
    # shared, not copied
    assert ours.experts.gate_up_proj is block.experts.gate_up_proj
    assert ours.gate is block.gate


def test_router_logits_are_still_recorded():
    """transformers hooks the router module to collect router_logits (aux loss): the patched
    block keeps that module, so output_router_logits still works."""
    model = tiny_model("qwen3_moe")
    ids, mask = inputs()
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
        argon_hf.patch(model)
        out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
    assert len(out.router_logits) == len(ref.router_logits) == 2
    for a, b in zip(out.router_logits, ref.router_logits):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(out.aux_loss, ref.aux_loss)


def test_save_pretrained_of_a_patched_model_loads_unpatched(tmp_path):
    model = tiny_model("qwen3_next")
    ids, mask = inputs()
    argon_hf.patch(model)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path)
    plain = type(model).from_pretrained(tmp_path).eval()
    assert not argon_hf.is_patched(plain)
    with torch.no_grad():
        ref = plain(input_ids=ids, attention_mask=mask).logits
    assert rel_err(out, ref) <= TOL[torch.float32]


def test_patch_twice_is_a_no_op_and_unpatch_restores_the_objects():
    model = tiny_model("mixtral")
    originals = [model.get_submodule(f"model.layers.{i}.mlp") for i in range(2)]
    assert len(argon_hf.patch(model)) == 2
    assert argon_hf.patch(model) == []
    argon_hf.unpatch(model)
    assert [model.get_submodule(f"model.layers.{i}.mlp") for i in range(2)] == originals


def test_unsupported_activation_raises_or_is_skipped():
    model = tiny_model("olmoe", hidden_act="gelu")
    with pytest.raises(ValueError, match="not SiLU"):
        argon_hf.patch(model)
    assert argon_hf.patch(model, strict=False) == []


@pytest.mark.parametrize("family,overrides", [
    ("qwen3_moe", {}),
    ("mixtral", {}),
    # sigmoid routing with an expert bias and a routed scaling factor, dense first layer
    ("lfm2_moe", dict(num_dense_layers=1, routed_scaling_factor=2.5)),
])
def test_experts_implementation_hook(family, overrides, monkeypatch):
    """model.set_experts_implementation("argon"): the model's block routes, argon runs the
    experts."""
    if family == "lfm2_moe":
        if not hasattr(transformers, "Lfm2MoeForCausalLM"):
            pytest.skip(f"Lfm2Moe is not in transformers {transformers.__version__}")
        torch.manual_seed(0)
        config = transformers.Lfm2MoeConfig(**{**COMMON, "num_key_value_heads": 2},
                                            moe_intermediate_size=32, intermediate_size=96,
                                            num_experts=8, num_experts_per_tok=3,
                                            layer_types=["full_attention", "conv"], **overrides)
        model = transformers.Lfm2MoeForCausalLM(config).eval()
    else:
        model = tiny_model(family, **overrides)
    ids, mask = inputs()
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return moe_experts(*args, **kwargs)

    monkeypatch.setattr(argon_hf, "moe_experts", counting)
    assert argon_hf.register_experts_implementation() == "argon"
    with torch.no_grad():
        model.set_experts_implementation("eager")
        ref = model(input_ids=ids, attention_mask=mask).logits
        model.set_experts_implementation("argon")
        assert model.config._experts_implementation == "argon"
        out = model(input_ids=ids, attention_mask=mask).logits
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
    assert rel_err(out, ref) <= TOL[torch.float32]
    n_moe_layers = sum(hasattr(m, "gate_up_proj") for m in model.modules())
    assert n_moe_layers >= 1 and len(calls) == 3 * n_moe_layers  # forward + 2 generate steps


def test_patched_model_compiles_fullgraph_block():
    torch._dynamo.reset()
    model = tiny_model("qwen3_next")
    argon_hf.patch(model)
    block = model.get_submodule("model.layers.1.mlp")
    x = torch.randn(2, 9, H)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x), atol=1e-6, rtol=1e-6)
