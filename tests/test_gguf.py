"""torch_argon.gguf: tiny GGUF MoE files written here with gguf's writer, loaded with the
experts kept in their blocks: the metadata read per architecture, the expert bytes on the model
equal to the file's, and bad files refused with an error naming the file and the tensor."""
import pytest
import torch

from gguf_files import write_moe_file
from torch_argon import gguf as ag

pytest.importorskip("gguf")

FAMILIES = {  # family: (GGUF arch, renormalize, shared expert)
    "qwen3moe": ("qwen3moe", True, None),
    "qwen2moe": ("qwen2moe", False, 128),
    "mixtral": ("llama", True, None),
    "olmoe": ("olmoe", False, None),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_config_and_bytes(tmp_path, family):
    arch, renorm, shared = FAMILIES[family]
    path = tmp_path / f"{family}.gguf"
    written = write_moe_file(path, family, shared_inter=shared, formats=("Q4_K", "Q8_0", "Q6_K"))
    f = ag.GGUFMoE(path)
    c = f.config
    assert (c.arch, c.n_experts, c.top_k, c.hidden, c.inter) == (arch, 4, 2, 256, 256)
    assert (c.scoring, c.renormalize, c.moe_blocks) == ("softmax", renorm, (0, 1))
    layers = f.moe_layers()
    for b, layer in layers.items():
        e = layer.experts.expert_weights()
        assert not e.fused  # two formats: gate and up apart
        for part in ("gate", "up", "down"):
            got = getattr(e, part).data
            assert got.dtype == torch.uint8
            assert torch.equal(got, written[f"blk.{b}.ffn_{part}_exps.weight"]), part
        assert (layer.shared_expert is not None) == bool(shared)
        assert layer.gate.renormalize == renorm
    assert f.expert_bytes(0) == sum(t.numel() for n, t in written.items() if n.startswith("blk.0"))


def test_gate_and_up_of_one_format_are_concatenated(tmp_path):
    written = write_moe_file(tmp_path / "m.gguf", formats=("IQ4_XS", "IQ4_XS", "Q4_K"))
    e = ag.GGUFMoE(tmp_path / "m.gguf").experts(1, "cpu")
    assert e.fused and e.gate_up.qtype.name == "IQ4_XS"
    want = torch.cat([written["blk.1.ffn_gate_exps.weight"], written["blk.1.ffn_up_exps.weight"]],
                     dim=1)
    assert torch.equal(e.gate_up.data, want)


def test_fused_gate_up_tensor(tmp_path):
    written = write_moe_file(tmp_path / "m.gguf", formats=("Q8_0", "Q8_0", "Q8_0"),
                             fused_gate_up=True)
    e = ag.GGUFMoE(tmp_path / "m.gguf").experts(0, "cpu")
    assert e.fused and torch.equal(e.gate_up.data, written["blk.0.ffn_gate_up_exps.weight"])


def test_metadata_overrides_the_arch_rules(tmp_path):
    write_moe_file(tmp_path / "m.gguf", "qwen3moe",
                   extra_metadata={"qwen3moe.expert_gating_func": 2})
    c = ag.GGUFMoE(tmp_path / "m.gguf").config
    assert c.scoring == "sigmoid"


@pytest.mark.parametrize("skip,match", [
    ("blk.1.ffn_up_exps.weight", "missing tensor 'blk.1.ffn_up_exps.weight'"),
    ("blk.0.ffn_gate_inp.weight", "missing tensor 'blk.0.ffn_gate_inp.weight'"),
])
def test_missing_tensors(tmp_path, skip, match):
    write_moe_file(tmp_path / "m.gguf", skip=(skip,))
    with pytest.raises(ag.GGUFError, match=match):
        ag.GGUFMoE(tmp_path / "m.gguf").moe_layers()


def test_truncated_file(tmp_path):
    path = tmp_path / "m.gguf"
    write_moe_file(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ag.GGUFError, match="not a readable GGUF file"):
        ag.GGUFMoE(path)


def test_unknown_quant_type(tmp_path):
    write_moe_file(tmp_path / "m.gguf", formats=("Q4_K", "Q4_K", "Q4_1"))
    with pytest.raises(ag.GGUFError, match=r"'blk.0.ffn_down_exps.weight' is stored as Q4_1"):
        ag.GGUFMoE(tmp_path / "m.gguf").moe_layer(0)


def test_mismatched_shapes(tmp_path):
    path = tmp_path / "m.gguf"
    write_moe_file(path, extra_metadata={})
    f = ag.GGUFMoE(path)
    bad = ag.MoEConfig(**{**f.config.__dict__, "inter": 512})
    object.__setattr__(f, "config", bad)
    with pytest.raises(ag.GGUFError, match=r"'blk.0.ffn_down_exps.weight' has shape \[4, 256, 256\], "
                                           r"expected \[4, 256, 512\]"):
        f.experts(0, "cpu")


def test_not_an_moe_file(tmp_path):
    import gguf
    path = tmp_path / "dense.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ag.GGUFError, match="expert_count is missing or 0"):
        ag.GGUFMoE(path)


@pytest.mark.parametrize("formats", [("F16", "F16", "F16"), ("BF16", "BF16", "BF16"),
                                     ("F32", "F16", "BF16")], ids=str)
def test_float_experts_run_dense(tmp_path, formats):
    """Experts stored as plain floats (a converter's output before quantizing) load as dense
    stacks in the layer's dtype and run the dense kernels (they raised in forward before:
    "qtype 30 is BF16, a plain float type ...")."""
    import torch_argon
    from torch_argon import reference
    from torch_argon.nn import Experts
    written = write_moe_file(tmp_path / "m.gguf", formats=formats)
    f = ag.GGUFMoE(tmp_path / "m.gguf")
    layer = f.moe_layer(0)
    assert isinstance(layer.experts, Experts)
    w = layer.experts.expert_weights()
    assert w.kind == "dense" and w.dtype == torch.float32
    values = {part: torch_argon.quant.dequantize_reference(
        written[f"blk.0.ffn_{part}_exps.weight"], fmt, 256) for part, fmt in
        zip(("gate", "up", "down"), formats)}
    assert torch.equal(w.gate_up, torch.cat([values["gate"], values["up"]], dim=1))
    assert torch.equal(w.down, values["down"])
    x = torch.randn(9, 256)
    with torch.no_grad():
        got = layer(x)
        ids, weights = torch_argon.route(x, layer.gate.weight, 2, renormalize=True)
    want = reference.moe_layer(x, None, w, 2, topk_ids=ids, topk_weights=weights)
    assert float((got - want).norm() / want.norm()) < 1e-5
    bf16 = f.moe_layer(1, dtype=torch.bfloat16)
    assert bf16.experts.expert_weights().dtype == torch.bfloat16
    with torch.no_grad():
        assert bf16(x.bfloat16()).dtype == torch.bfloat16
