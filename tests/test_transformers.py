"""torch_argon.integrations.transformers on tiny randomly initialised models (no downloads):
each supported family in the installed transformers is patched, its logits compared with the
unpatched model, generate() run, and unpatched again; then what transformers' own model test
suites exercise (issue 37): patching under a meta device (from_pretrained), transformers'
_init_weights on patched blocks, GELU activations, training (gradients), version checks.

Tolerances (max |patched - original| / max |original|, logits): fp32 1e-5; bf16 3e-2, since
the original rounds its expert outputs and routing weights to bf16 at other points than the
argon combine does (fp32 accumulation, one rounding), and the difference goes through every
later layer. Measured: fp32 <= 4e-7; bf16 0.8e-2 to 1.2e-2, the order by which transformers'
own eager and grouped_mm expert paths differ from each other (0.6e-2 to 0.8e-2).
"""
import copy
import importlib
import pickle

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


@pytest.fixture
def argon_calls(monkeypatch):
    """Counts the patched blocks' forwards that ran on argon (not the original forward)."""
    calls = []
    run = argon_hf.argon_forward

    def counting(block, *args, **kwargs):
        calls.append(block)
        return run(block, *args, **kwargs)

    monkeypatch.setattr(argon_hf, "argon_forward", counting)
    return calls


def own_class(block):
    """The transformers class of a block, patched or not."""
    return type(block).__bases__[1] if isinstance(block, argon_hf.ArgonBlock) else type(block)


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
def test_patched_logits_match_and_generate_runs(family, dtype, argon_calls):
    model = tiny_model(family, dtype)
    ids, mask = inputs()
    params = {k: v.data_ptr() for k, v in model.state_dict().items()}
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits
        ref_tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4,
                                    do_sample=False)

        blocks = [model.get_submodule(f"model.layers.{i}.mlp") for i in range(2)]
        names = argon_hf.patch(model)
        assert names == [f"model.layers.{i}.mlp" for i in range(2)]
        assert names.skipped == {}
        # the same block objects, still of their own transformers class
        assert [model.get_submodule(n) for n in names] == blocks
        assert all(isinstance(b, argon_hf.ArgonBlock) and isinstance(b, own_class(b))
                   for b in blocks)
        # same parameters under the same names: nothing copied, checkpoints load as before
        assert {k: v.data_ptr() for k, v in model.state_dict().items()} == params
        out = model(input_ids=ids, attention_mask=mask).logits
        assert len(argon_calls) == 2  # one forward, two blocks, both on argon
        assert rel_err(out, ref) <= TOL[dtype], f"{family} {dtype}: {rel_err(out, ref):.3g}"
        tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4,
                                do_sample=False)
        assert tokens.shape == ref_tokens.shape
        if dtype == torch.float32:  # greedy decoding agrees when the logits do this closely
            assert torch.equal(tokens, ref_tokens)

        assert argon_hf.unpatch(model) == names
        assert not argon_hf.is_patched(model)
        assert not any(isinstance(b, argon_hf.ArgonBlock) for b in blocks)
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
    assert isinstance(ours, MoE)
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


def test_patch_twice_is_a_no_op_and_unpatch_restores_the_classes():
    model = tiny_model("mixtral")
    originals = [model.get_submodule(f"model.layers.{i}.mlp") for i in range(2)]
    classes = [type(b) for b in originals]
    assert len(argon_hf.patch(model)) == 2
    assert argon_hf.patch(model) == []
    argon_hf.unpatch(model)
    assert [model.get_submodule(f"model.layers.{i}.mlp") for i in range(2)] == originals
    assert [type(b) for b in originals] == classes
    assert not any(argon_hf._MOE in vars(b) for b in originals)


def test_unsupported_activation_raises_or_is_skipped_with_the_reason():
    """Item 10: a block argon cannot run is never skipped silently: strict raises naming it,
    strict=False reports and warns which blocks were left and why."""
    model = tiny_model("olmoe", hidden_act="relu")
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp.*ReLU.*none of SiLU"):
        argon_hf.patch(model)
    with pytest.warns(UserWarning, match="patched 0 MoE block.*skipped 2"):
        report = argon_hf.patch(model, strict=False)
    assert report == [] and not argon_hf.is_patched(model)
    assert set(report.skipped) == {"model.layers.0.mlp", "model.layers.1.mlp"}
    assert all("none of SiLU" in why for why in report.skipped.values())


@pytest.mark.parametrize("hidden_act,expected", [
    ("silu", "silu"), ("gelu", "gelu"), ("gelu_pytorch_tanh", "gelu_tanh"),
    ("gelu_new", "gelu_tanh")])
@pytest.mark.parametrize("family", ["qwen2_moe", "mixtral", "qwen3_next"])
def test_gelu_blocks_are_patched_and_match_the_original(family, hidden_act, expected,
                                                          argon_calls):
    """Item 10: transformers' test configs use hidden_act="gelu"; such blocks are patched (not
    skipped) and run GeGLU on argon, shared expert included (qwen2_moe, qwen3_next)."""
    model = tiny_model(family, hidden_act=hidden_act)
    blocks = [model.get_submodule(f"model.layers.{i}.mlp") for i in range(2)]
    x = torch.randn(3, 17, H)
    with torch.no_grad():
        ref = [b(x) for b in blocks]
        report = argon_hf.patch(model)
        assert report.activations == {f"model.layers.{i}.mlp": expected for i in range(2)}
        out = [b(x) for b in blocks]
    assert len(argon_calls) == 2
    for o, r in zip(out, ref):
        assert rel_err(o, r) <= TOL[torch.float32], rel_err(o, r)


def test_activation_is_read_on_the_cpu_whatever_the_device_context():
    act = transformers.activations.ACT2FN
    with torch.device("meta"):
        assert argon_hf.activation_of(act["silu"]) == "silu"
        assert argon_hf.activation_of(act["gelu"]) == "gelu"
        assert argon_hf.activation_of(act["gelu_pytorch_tanh"]) == "gelu_tanh"
        assert argon_hf.activation_of(act["quick_gelu"]) is None
        assert argon_hf.activation_of(torch.nn.PReLU()) is None  # weights of its own, on meta


def tiny_config(family, **overrides):
    config_cls, model_cls, kwargs = FAMILIES[family]
    if not hasattr(transformers, model_cls):
        pytest.skip(f"{model_cls} is not in transformers {transformers.__version__}")
    return (getattr(transformers, config_cls)(**COMMON, **{**kwargs, **overrides}),
            getattr(transformers, model_cls))


def assert_same_logits(model, reference, argon_calls):
    """The patched model's logits equal the reference model's, with both blocks run on argon."""
    ids, mask = inputs()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask).logits
        ref = reference(input_ids=ids, attention_mask=mask).logits
    assert len(argon_calls) == 2
    assert rel_err(out, ref) <= TOL[torch.float32]


@pytest.mark.parametrize("family", FAMILIES)
def test_patch_under_a_meta_device_context_keeps_the_meta_weights(family, argon_calls):
    """Item 7: a model built under torch.device("meta") (transformers' empty init) is patched
    without touching its weights, which stay on meta; materialised and loaded afterwards it
    runs on argon and matches the reference model."""
    config, model_cls = tiny_config(family)
    torch.manual_seed(0)
    reference = model_cls(config).eval()
    with torch.device("meta"):
        model = model_cls(config)
        report = argon_hf.patch(model)
    assert report == [f"model.layers.{i}.mlp" for i in range(2)]
    assert {p.device.type for p in model.parameters()} == {"meta"}
    model.to_empty(device="cpu")
    model.load_state_dict(reference.state_dict())
    with torch.no_grad():  # the non-persistent ones too (rotary inv_freq)
        for name, buffer in reference.named_buffers():
            model.get_buffer(name).copy_(buffer)
    model.eval()
    assert_same_logits(model, reference, argon_calls)


@pytest.fixture
def patch_every_model(monkeypatch):
    """Patch each model at the end of its __init__ (post_init), as the transformers suite runner
    does: from_pretrained then patches under its meta device, before the weights load."""
    post_init = transformers.PreTrainedModel.post_init
    reports = []

    def patched_post_init(self, *args, **kwargs):
        post_init(self, *args, **kwargs)
        reports.append(argon_hf.patch(self))

    monkeypatch.setattr(transformers.PreTrainedModel, "post_init", patched_post_init)
    return reports


def test_from_pretrained_of_a_model_patched_at_init(tmp_path, patch_every_model, argon_calls):
    """Item 7 through from_pretrained: patched under its meta device, weights loaded after."""
    config, model_cls = tiny_config("qwen3_moe")
    torch.manual_seed(0)
    reference = model_cls(config).eval()
    assert argon_hf.unpatch(reference)  # the fixture patched it at init
    reference.save_pretrained(tmp_path)
    model = model_cls.from_pretrained(tmp_path).eval()
    assert argon_hf.patched_blocks(model) == [f"model.layers.{i}.mlp" for i in range(2)]
    assert_same_logits(model, reference, argon_calls)


def test_qwen3_next_router_is_initialised_by_init_weights_after_patching(patch_every_model):
    """Item 8: transformers initialises Qwen3-Next's router through
    isinstance(module, Qwen3NextSparseMoeBlock); a patched block still is one, so
    from_pretrained(state_dict={}) (every weight missing, test_can_init_all_missing_weights)
    initialises it as the unpatched model's init does."""
    config, model_cls = tiny_config("qwen3_next")
    block_cls = transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextSparseMoeBlock
    torch.manual_seed(0)
    model = model_cls.from_pretrained(None, config=copy.deepcopy(config), state_dict={})
    assert argon_hf.patched_blocks(model) == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert not [n for n, p in model.named_parameters() if p.device.type == "meta"]
    for name in argon_hf.patched_blocks(model):
        block = model.get_submodule(name)
        assert isinstance(block, block_cls)
        std = block.gate.weight.std().item()
        assert 0.5 * config.initializer_range < std < 1.5 * config.initializer_range, std
        with torch.no_grad():
            block.gate.weight.zero_()
        model._init_weights(block)
        assert block.gate.weight.abs().sum() > 0
    # the state_dict keys are the unpatched model's
    argon_hf.unpatch(model)
    assert sorted(model.state_dict()) == sorted(model_cls(config).state_dict())


def test_patched_models_deepcopy_and_pickle(argon_calls):
    model = tiny_model("qwen2_moe")
    argon_hf.patch(model)
    clone = copy.deepcopy(model)
    loaded = pickle.loads(pickle.dumps(model))
    ids, mask = inputs()
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits
        for other in (clone, loaded):
            assert argon_hf.patched_blocks(other) == argon_hf.patched_blocks(model)
            torch.testing.assert_close(other(input_ids=ids, attention_mask=mask).logits, ref)
            block = other.get_submodule("model.layers.0.mlp")
            assert block.__dict__[argon_hf._MOE].gate is block.gate  # its own, not the source's
    assert len(argon_calls) == 6


def model_grads(model, ids, labels):
    model.zero_grad()
    model(input_ids=ids, labels=labels).loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_training_runs_on_argon_and_gradients_reach_the_router_and_experts(family, checkpointing,
                                                                          argon_calls):
    """Issue 46: a patched block trains on argon (on_grad="train", the default): every
    parameter gets the unpatched model's gradient (fp32 sums in another order: 1e-4 of the
    largest), with gradient checkpointing too (the block runs again in the recomputation)."""
    model = tiny_model(family).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    ids, _ = inputs()
    torch.manual_seed(3)
    ref = model_grads(model, ids, ids)
    argon_hf.patch(model)
    torch.manual_seed(3)
    got = model_grads(model, ids, ids)
    assert len(argon_calls) == (4 if checkpointing else 2)
    for name in ref:
        if ref[name] is None:
            assert got[name] is None, name
            continue
        assert rel_err(got[name], ref[name]) <= 1e-4, name
    for name in ("model.layers.0.mlp.gate.weight", "model.layers.1.mlp.experts.gate_up_proj",
                 "model.layers.1.mlp.experts.down_proj"):
        assert got[name].abs().sum() > 0, f"{name} has no gradient"


def test_training_with_on_grad_fallback_runs_the_blocks_own_forward(argon_calls):
    """The fallback stays available: where gradients are needed the block's own forward runs
    (the unpatched gradients, bit for bit); under no_grad the model runs on argon."""
    model = tiny_model("qwen2_moe").train()
    ids, _ = inputs()
    torch.manual_seed(3)
    ref = model_grads(model, ids, ids)
    argon_hf.patch(model, on_grad="fallback")
    torch.manual_seed(3)
    got = model_grads(model, ids, ids)
    assert argon_calls == []
    for name in ("model.layers.0.mlp.gate.weight", "model.layers.1.mlp.experts.gate_up_proj"):
        torch.testing.assert_close(got[name], ref[name], rtol=0, atol=0)
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)
    assert len(argon_calls) == 2


def test_training_raises_naming_the_block_with_on_grad_raise(argon_calls):
    model = tiny_model("mixtral").train()
    argon_hf.patch(model, on_grad="raise")
    ids, _ = inputs()
    with pytest.raises(RuntimeError, match="MixtralSparseMoeBlock.*on_grad='raise'.*requires? grad"):
        model(input_ids=ids, labels=ids)
    with torch.no_grad():  # inference is unaffected
        model.eval()(input_ids=ids)
    assert len(argon_calls) == 2
    with pytest.raises(ValueError, match="on_grad"):
        argon_hf.patch(tiny_model("mixtral"), on_grad="ignore")


def loss_curve(model, ids, steps):
    """The losses of `steps` AdamW steps of causal-LM training on one batch."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_fine_tuning_a_patched_qwen3_moe_follows_the_unpatched_loss_curve(argon_calls):
    """Issue 46: 20 steps of AdamW on a tiny random Qwen3-MoE, patched and not, from the same
    weights: the same loss at every step to 1e-4 relative, and the loss falls."""
    ids, _ = inputs()
    want = loss_curve(tiny_model("qwen3_moe").train(), ids, 20)
    model = tiny_model("qwen3_moe").train()
    argon_hf.patch(model)
    got = loss_curve(model, ids, 20)
    assert len(argon_calls) == 2 * 20
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-4 * abs(w), f"step {step}: {g} vs {w}"
    assert got[-1] < 0.5 * got[0]


def test_frozen_model_with_grad_mode_on_runs_on_argon(argon_calls):
    """Nothing requires grad (a frozen model): argon runs even with grad mode on."""
    model = tiny_model("olmoe").requires_grad_(False)
    argon_hf.patch(model)
    ids, _ = inputs()
    model(input_ids=ids)
    assert len(argon_calls) == 2


def test_mixtral_router_jitter_in_training_mode_falls_back(argon_calls):
    model = tiny_model("mixtral", router_jitter_noise=0.1).requires_grad_(False).train()
    argon_hf.patch(model)
    ids, _ = inputs()
    model(input_ids=ids)
    assert argon_calls == []


@pytest.mark.parametrize("version,patch_ok,hook_ok", [
    ("4.57.1", False, False), ("5.0.0", True, False), ("5.3.0", True, False),
    ("5.6.2", True, False), ("5.7.0.dev0", True, True), ("5.24.0", True, True),
    ("6.0.0", False, False)])
def test_version_checks_say_what_the_installed_transformers_supports(monkeypatch, version,
                                                                     patch_ok, hook_ok):
    """Item 9: set_experts_implementation("argon") raises ValueError on transformers 5.0-5.6
    (custom implementations are accepted from 5.7); the hook says so up front, naming the
    installed version, and patch() names its own range."""
    # the transformers module as sys.modules has it now (transformers replaces its lazy module)
    monkeypatch.setattr(importlib.import_module("transformers"), "__version__", version)
    if hook_ok:
        assert argon_hf.register_experts_implementation() == "argon"
    else:
        with pytest.raises(RuntimeError, match=rf"needs transformers >= 5\.7.*installed: "
                                               rf"{version}"):
            argon_hf.register_experts_implementation()
    model = tiny_model("olmoe")
    if patch_ok:
        assert len(argon_hf.patch(model)) == 2
    else:
        with pytest.raises(RuntimeError, match=rf">= 5\.0, < 6\.0.*installed: {version}"):
            argon_hf.patch(model)


@pytest.mark.parametrize("family,overrides", [
    ("qwen3_moe", {}),
    ("mixtral", {}),
    ("olmoe", dict(hidden_act="gelu")),
    ("qwen3_moe", dict(hidden_act="gelu_pytorch_tanh")),
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


def test_experts_implementation_hook_trains_on_argon(monkeypatch):
    """Issue 46 for the hook: with gradients needed the experts run on argon too, and get the
    eager experts' gradients (fp32 sums in another order)."""
    model = tiny_model("qwen3_moe").train()
    ids, _ = inputs()
    torch.manual_seed(3)
    ref = model_grads(model, ids, ids)
    argon_hf.register_experts_implementation()
    model.set_experts_implementation("argon")
    calls, run = [], argon_hf.moe_experts
    monkeypatch.setattr(argon_hf, "moe_experts", lambda *a, **k: calls.append(1) or run(*a, **k))
    torch.manual_seed(3)
    got = model_grads(model, ids, ids)
    assert len(calls) == 2
    for name in ("model.layers.1.mlp.experts.gate_up_proj", "model.layers.0.mlp.gate.weight"):
        assert rel_err(got[name], ref[name]) <= 1e-4, name


def test_patched_model_compiles_fullgraph_block():
    torch._dynamo.reset()
    model = tiny_model("qwen3_next")
    argon_hf.patch(model)
    block = model.get_submodule("model.layers.1.mlp")
    x = torch.randn(2, 9, H)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x), atol=1e-6, rtol=1e-6)
