"""torch_argon.integrations.gguf_transformers: tiny GGUF MoE models written here with gguf's
writer, loaded as transformers models whose MoE blocks run argon on the packed experts.

Oracles: transformers' own GGUF loader (every tensor dequantized) for Qwen3-MoE and Qwen2-MoE;
for Mixtral and OLMoE, which that loader does not build as MoE models, the same model with
transformers' own sparse MoE blocks on expert stacks dequantized by the gguf package. Logits in
float32 agree to atol = rtol = 1e-4 (measured: about 1e-6 on logits of magnitude ~4; the
quantized GEMM sums in another order than the dense matmul)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from gguf_files import dense_twin, transformers_dense_load, write_model_file
from torch_argon.gguf import GGUFError

pytest.importorskip("gguf")
pytest.importorskip("transformers")
from torch_argon.integrations.gguf_transformers import (  # noqa: E402
    ArgonGgufExperts, argon_gguf_experts, from_gguf)
from torch_argon.nn import MoE  # noqa: E402

TOL = dict(atol=1e-4, rtol=1e-4)
SHARED = {"qwen2moe": 512}


def _oracle(family, model, path):
    if family == "qwen3moe":
        return transformers_dense_load(path)
    if family == "qwen2moe":  # its GGUF config mapping lacks the expert widths
        return transformers_dense_load(path, config=model.config)
    return dense_twin(model, path)


@pytest.mark.parametrize("family", ["qwen3moe", "qwen2moe", "mixtral", "olmoe"])
def test_logits_generate_and_bytes(tmp_path, family):
    path = tmp_path / f"{family}.gguf"
    written = write_model_file(path, family, shared_inter=SHARED.get(family),
                               tied=family == "olmoe")
    model = from_gguf(path, activation_quant="none")  # q8: test_q8_logits
    layers = model.model.layers
    assert all(isinstance(layer.mlp, MoE) for layer in layers)
    # The expert bytes on the model are the file's, untouched and never dequantized.
    for b, layer in enumerate(layers):
        e = layer.mlp.experts.expert_weights()
        got = {"gate": e.gate_up.data[:, :e.gate_up.data.shape[1] // 2],
               "up": e.gate_up.data[:, e.gate_up.data.shape[1] // 2:], "down": e.down.data}
        for part, blocks in got.items():
            assert blocks.dtype == torch.uint8
            assert torch.equal(blocks, written["experts"][f"blk.{b}.ffn_{part}_exps.weight"])
    assert not any(p.is_floating_point() and p.dim() == 3 for p in model.parameters())

    oracle = _oracle(family, model, path)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator()
                        .manual_seed(1))
    with torch.no_grad():
        got, want = model(ids).logits, oracle(ids).logits
    torch.testing.assert_close(got, want, **TOL)
    out = model.generate(ids[:1], max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 30)
    assert torch.equal(out, oracle.generate(ids[:1], max_new_tokens=6, do_sample=False))


def test_q8_logits(tmp_path):
    """from_gguf's default on a CPU with integer dot products is q8 (the layer's "auto"): the
    logits stay within the activations' 8-bit rounding of transformers' dequantized model."""
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe")
    model = from_gguf(path, activation_quant="q8")
    oracle = transformers_dense_load(path)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator()
                        .manual_seed(1))
    with torch.no_grad():
        got, want = model(ids).logits, oracle(ids).logits
        exact = from_gguf(path, activation_quant="none")(ids).logits
    assert not torch.equal(got, exact)  # q8 ran
    assert ((got - want).norm() / want.norm()).item() < 2e-2


def test_mixtral_q_and_k_rows_are_unpermuted(tmp_path):
    path = tmp_path / "m.gguf"
    written = write_model_file(path, "mixtral", attn_format="F32")
    model = from_gguf(path)
    for b, q in written["q"].items():
        assert torch.equal(model.model.layers[b].self_attn.q_proj.weight, q)


def test_bfloat16(tmp_path):
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe", n_blocks=1)
    model = from_gguf(path, dtype=torch.bfloat16)
    oracle = transformers_dense_load(path)
    ids = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = model(ids).logits.float()
        want = oracle(ids).logits
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    # bf16 activations through two decoder blocks: relative error of a few 1e-2
    assert (got - want).norm() / want.norm() < 5e-2


def test_float_experts(tmp_path):
    """A model whose experts are stored as BF16 / F16 (a converter's output before quantizing):
    its MoE blocks hold them as dense stacks and agree with transformers' own loader."""
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe", expert_formats=("BF16", "BF16", "F16"))
    model = from_gguf(path)
    experts = model.model.layers[0].mlp.experts.expert_weights()
    assert experts.kind == "dense" and experts.dtype == torch.float32
    oracle = transformers_dense_load(path)
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, oracle(ids).logits, **TOL)


_PEAK = textwrap.dedent("""
    import gc, sys
    sys.path[:0] = sys.argv[3:]
    from gguf_files import transformers_dense_load
    from torch_argon.integrations.gguf_transformers import from_gguf
    load = from_gguf if sys.argv[1] == "argon" else transformers_dense_load

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

    # A first load, thrown away, does the lazy imports and first-use setup of either path,
    # so that what is measured is the load itself.
    load(sys.argv[2])
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak RSS (VmHWM) to the current RSS
    before = status("VmRSS:")
    model = load(sys.argv[2])
    print(status("VmHWM:") - before)
""")


def _peak_load_bytes(how, path):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    out = subprocess.run([sys.executable, "-c", _PEAK, how, str(path), here, root],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_load_peak_memory_is_under_a_third_of_the_dense_load(tmp_path):
    # Q4_K experts, 2 blocks x 16 experts x 3 x 768 x 512: 10.6 MB in the file, 75 MB a block
    # in float32 once dequantized.
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe", E=16, H=512, n_head=8, n_kv_head=4,
                     expert_formats=("Q4_K", "Q4_K", "Q4_K"))
    argon = _peak_load_bytes("argon", path)
    dense = _peak_load_bytes("dense", path)
    print(f"peak load RSS above baseline: argon {argon / 2**20:.1f} MiB, "
          f"transformers {dense / 2**20:.1f} MiB")
    assert argon < dense / 3


@pytest.mark.parametrize("kw,match", [
    (dict(skip=("blk.1.ffn_up_exps.weight",)), "missing tensor 'blk.1.ffn_up_exps.weight'"),
    (dict(skip=("blk.0.attn_k.weight",)), "missing tensor 'blk.0.attn_k.weight'"),
    (dict(expert_formats=("Q4_K", "Q4_K", "Q4_1")),
     "'blk.0.ffn_down_exps.weight' is stored as Q4_1"),
    (dict(expert_ffn_metadata=512),
     r"'blk.0.ffn_down_exps.weight' has shape \[8, 256, 768\], expected \[8, 256, 512\]"),
    (dict(n_kv_head=1, skip=()), None),
])
def test_bad_files(tmp_path, kw, match):
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe", n_blocks=2, **kw)
    if match is None:  # a consistent file with one kv head loads
        from_gguf(path)
        return
    with pytest.raises(GGUFError, match=match):
        from_gguf(path)


def test_attention_shape_disagreeing_with_metadata(tmp_path):
    import gguf
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe")
    # Rewrite the head count: attn_q then has rows for 4 heads where the metadata says 8.
    data = bytearray(path.read_bytes())
    reader = gguf.GGUFReader(str(path))
    field = reader.get_field("qwen3moe.attention.head_count")
    offset = int(field.parts[field.data[0]].ctypes.data - reader.data.ctypes.data)
    del reader, field
    data[offset:offset + 4] = (8).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match=r"'blk.0.attn_q.weight' has shape \[256, 256\], "
                                        r"expected \[512, 256\]"):
        from_gguf(path)


def test_truncated_file(tmp_path):
    path = tmp_path / "m.gguf"
    write_model_file(path, "qwen3moe")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(GGUFError, match="not a readable GGUF file"):
        from_gguf(path)


# ---- (a) transformers' packed experts (GgufExperts) on argon --------------------------------

def test_gguf_experts_run_on_argon_with_their_own_bytes():
    import gguf
    import torch.nn.functional as F
    GgufExperts = pytest.importorskip("transformers.integrations.gguf.utils").GgufExperts
    from torch_argon.quant import random_quantized
    E, H, I, T, K = 4, 256, 512, 9, 2
    g = torch.Generator().manual_seed(0)
    Q = gguf.GGMLQuantizationType
    packed = GgufExperts(E, H, I, int(Q.Q4_K), int(Q.Q6_K), torch.nn.SiLU())
    with torch.no_grad():
        packed.gate_up_proj.copy_(random_quantized("Q4_K", 2 * I, H, leading=(E,),
                                                   std=H ** -0.5, generator=g))
        packed.down_proj.copy_(random_quantized("Q6_K", H, I, leading=(E,), std=I ** -0.5,
                                                generator=g))
    holder = torch.nn.Sequential()
    holder.add_module("experts", packed)
    assert argon_gguf_experts(holder) == ["experts"]
    swapped = holder.experts
    assert isinstance(swapped, ArgonGgufExperts)
    assert swapped.gate_up_proj is packed.gate_up_proj and swapped.down_proj is packed.down_proj

    x = torch.randn(T, H, generator=g)
    ids = torch.randint(0, E, (T, K), generator=g)
    w = torch.rand(T, K, generator=g)

    def deq(blocks, qtype):
        return torch.from_numpy(gguf.quants.dequantize(blocks.numpy(), qtype).copy())

    w_gate_up, w_down = deq(packed.gate_up_proj, Q.Q4_K), deq(packed.down_proj, Q.Q6_K)
    want = torch.zeros(T, H)
    for t in range(T):
        for k in range(K):
            gate, up = (w_gate_up[ids[t, k]] @ x[t]).chunk(2)
            want[t] += w[t, k] * (w_down[ids[t, k]] @ (F.silu(gate) * up))
    torch.testing.assert_close(swapped(x, ids, w), want, **TOL)


def test_gguf_experts_of_a_format_argon_does_not_run():
    import gguf
    GgufExperts = pytest.importorskip("transformers.integrations.gguf.utils").GgufExperts
    Q = gguf.GGMLQuantizationType
    holder = torch.nn.Sequential()
    holder.add_module("experts", GgufExperts(2, 256, 256, int(Q.Q4_1), int(Q.Q4_K),
                                             torch.nn.SiLU()))
    with pytest.raises(ValueError, match="quantized type Q4_1, which torch_argon does not read"):
        argon_gguf_experts(holder)
    assert argon_gguf_experts(holder, strict=False) == []
