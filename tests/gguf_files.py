"""Tiny GGUF MoE files written in the tests themselves with the gguf package's writer: the
metadata of an architecture, random quantized expert tensors (finite scales), a float router
and, where the architecture has one, a shared expert stored quantized."""
import numpy as np
import torch

from torch_argon.quant import random_quantized

ARCH_KEYS = {"qwen3moe": "qwen3moe", "qwen2moe": "qwen2moe", "mixtral": "llama",
             "olmoe": "olmoe"}


def _blocks(fmt, E, n, k, g):
    """Random blocks of a format: finite-scale synthetic weights for the formats torch_argon
    reads, raw random bytes of the right size for others (files it must refuse)."""
    import gguf
    from torch_argon.quant import FORMATS
    if fmt in FORMATS:
        return random_quantized(fmt, n, k, leading=(E,), std=k ** -0.5, generator=g)
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]]
    return torch.randint(0, 256, (E, n, k // block * size), generator=g, dtype=torch.uint8)


def write_moe_file(path, family="qwen3moe", *, n_blocks=2, E=4, K=2, H=256, I=256,
                   formats=("Q4_K", "Q4_K", "Q6_K"), shared_inter=None, seed=0,
                   skip=(), fused_gate_up=False, extra_metadata=None):
    """Writes a GGUF file with `n_blocks` MoE blocks; returns {tensor name: uint8 blocks} of
    the expert tensors written (the bytes the loader must keep). formats: (gate, up, down).
    skip: tensor names to leave out (bad-file tests)."""
    import gguf
    arch = ARCH_KEYS[family]
    g = torch.Generator().manual_seed(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_blocks)
    w.add_embedding_length(H)
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_feed_forward_length(I)
    if shared_inter:
        w.add_expert_shared_feed_forward_length(shared_inter)
    for key, value in (extra_metadata or {}).items():
        w.add_uint32(key, value)
    written = {}

    def add(name, blocks, fmt):
        if name in skip:
            return
        w.add_tensor(name, blocks.numpy(), raw_dtype=gguf.GGMLQuantizationType[fmt])

    for b in range(n_blocks):
        gate_fmt, up_fmt, down_fmt = formats
        parts = {"gate": (gate_fmt, I, H), "up": (up_fmt, I, H), "down": (down_fmt, H, I)}
        made = {p: _blocks(f, E, n, k, g) for p, (f, n, k) in parts.items()}
        if fused_gate_up:
            name = f"blk.{b}.ffn_gate_up_exps.weight"
            blocks = torch.cat([made["gate"], made["up"]], dim=1)
            add(name, blocks, gate_fmt)
            written[name] = blocks
        else:
            for p in ("gate", "up"):
                name = f"blk.{b}.ffn_{p}_exps.weight"
                add(name, made[p], parts[p][0])
                written[name] = made[p]
        name = f"blk.{b}.ffn_down_exps.weight"
        add(name, made["down"], down_fmt)
        written[name] = made["down"]
        router = (torch.randn(E, H, generator=g) * H ** -0.5).numpy().astype(np.float32)
        if f"blk.{b}.ffn_gate_inp.weight" not in skip:
            w.add_tensor(f"blk.{b}.ffn_gate_inp.weight", router)
        if shared_inter:
            for p, (n, k) in (("gate", (shared_inter, H)), ("up", (shared_inter, H)),
                              ("down", (H, shared_inter))):
                add(f"blk.{b}.ffn_{p}_shexp.weight",
                    random_quantized("Q8_0", n, k, std=k ** -0.5, generator=g), "Q8_0")
            w.add_tensor(f"blk.{b}.ffn_gate_inp_shexp.weight",
                         (torch.randn(H, generator=g) * H ** -0.5).numpy().astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written
