"""GGUF MoE checkpoints with the experts kept in their GGUF blocks.

    from torch_argon import gguf
    f = gguf.GGUFMoE("Qwen3-30B-A3B-Q4_K_M.gguf")
    f.config                                   # arch, layers, experts, top-k, widths, routing
    layers = f.moe_layers(device="cuda", dtype=torch.bfloat16)   # {block index: nn.MoE}
    y = layers[0](x)                           # x [T, H]: the block's MoE on argon

Each MoE block becomes a `torch_argon.nn.MoE` whose experts are `nn.QuantExperts`: the bytes of
`blk.N.ffn_{gate,up,down}_exps` (or the fused `ffn_gate_up_exps`) exactly as the file stores them,
one format per tensor, copied to the device once and never dequantized; gate and up of one format
are concatenated (one GEMM), of two formats kept apart. Experts stored as plain floats (F32, F16,
BF16: a converter's output before quantizing) are dense: `nn.Experts` stacks in the layer's dtype,
run by the dense kernels (decided once, as the block loads: quant.build_experts). The router
(`ffn_gate_inp`) and the shared expert (`ffn_*_shexp`, Qwen2-MoE / Qwen3-Next) are small and stay
dense: dequantized if stored quantized. The file's metadata is read memory-mapped (the `gguf` package's reader); the expert
bytes are read from the file straight into their tensors; nothing but the tensors asked for is
read.

Routing rules per architecture (the file's `{arch}.expert_gating_func` and
`{arch}.expert_weights_norm` override them where present): qwen3moe and qwen3next softmax then
renormalised top-k; llama (Mixtral) softmax over the top-k logits, i.e. softmax then
renormalised; qwen2moe and olmoe softmax, not renormalised.
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from .nn import MoE, SwiGLUMLP, TopKRouter, experts_module
from .quant import QuantizedWeight, build_experts, dequantize_reference, qformat
from .quant.formats import NOT_READ, not_read


@dataclass(frozen=True)
class ArchRules:
    scoring: str
    renormalize: bool
    shared_expert: bool = False


# The MoE architectures read here, by GGUF arch name.
ARCHS = {
    "qwen3moe": ArchRules("softmax", True),
    "qwen3next": ArchRules("softmax", True, shared_expert=True),
    "qwen2moe": ArchRules("softmax", False, shared_expert=True),
    "llama": ArchRules("softmax", True),  # Mixtral is stored as llama with experts
    "olmoe": ArchRules("softmax", False),
}
GATING = {1: "softmax", 2: "sigmoid"}  # gguf.ExpertGatingFuncType


@dataclass(frozen=True)
class MoEConfig:
    arch: str
    n_blocks: int
    moe_blocks: tuple  # block indices that hold experts
    n_experts: int
    top_k: int
    hidden: int
    inter: int
    shared_inter: Optional[int]
    scoring: str
    renormalize: bool


class GGUFError(ValueError):
    """A GGUF file that cannot be read as an MoE checkpoint; the message names the file and the
    tensor or key."""


def _require_gguf():
    try:
        import gguf
    except ImportError as e:
        raise ImportError("torch_argon.gguf needs the gguf package: pip install gguf") from e
    return gguf


class GGUFMoE:
    """One GGUF file, opened memory-mapped; its MoE blocks on demand."""

    def __init__(self, path):
        gguf = _require_gguf()
        self.path = str(path)
        try:
            self.reader = gguf.GGUFReader(self.path, "r")
        except (ValueError, OSError, IndexError, KeyError) as e:
            raise GGUFError(f"{self.path}: not a readable GGUF file ({type(e).__name__}: {e})") \
                from e
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.config = self._read_config()

    # ---- metadata -------------------------------------------------------------------------
    def _field(self, key, default=None):
        field = self.reader.get_field(key)
        if field is None:
            return default
        value = field.contents()
        return value

    def _require(self, key):
        value = self._field(key)
        if value is None:
            raise GGUFError(f"{self.path}: missing metadata key {key!r}")
        return value

    def _read_config(self) -> MoEConfig:
        arch = self._require("general.architecture")
        if arch not in ARCHS:
            raise GGUFError(f"{self.path}: architecture {arch!r} is not an MoE architecture "
                            f"torch_argon reads (supported: {', '.join(ARCHS)})")
        rules = ARCHS[arch]
        n_experts = int(self._field(f"{arch}.expert_count", 0) or 0)
        if n_experts < 1:
            raise GGUFError(f"{self.path}: {arch}.expert_count is missing or 0: no experts")
        n_blocks = int(self._require(f"{arch}.block_count"))
        hidden = int(self._require(f"{arch}.embedding_length"))
        inter = self._field(f"{arch}.expert_feed_forward_length")
        if inter is None:  # Mixtral-era llama files give the expert width as the FFN width
            inter = self._require(f"{arch}.feed_forward_length")
        shared = self._field(f"{arch}.expert_shared_feed_forward_length")
        gating = self._field(f"{arch}.expert_gating_func")
        norm = self._field(f"{arch}.expert_weights_norm")
        moe_blocks = tuple(b for b in range(n_blocks)
                           if self._expert_name(b, "down") in self.tensors)
        if not moe_blocks:
            raise GGUFError(f"{self.path}: no expert tensors (blk.N.ffn_down_exps.weight) found")
        return MoEConfig(
            arch=arch, n_blocks=n_blocks, moe_blocks=moe_blocks, n_experts=n_experts,
            top_k=int(self._require(f"{arch}.expert_used_count")), hidden=hidden,
            inter=int(inter), shared_inter=int(shared) if shared else None,
            scoring=GATING.get(int(gating), "softmax") if gating is not None else rules.scoring,
            renormalize=bool(norm) if norm is not None else rules.renormalize)

    # ---- tensors --------------------------------------------------------------------------
    @staticmethod
    def _expert_name(block, part):
        return f"blk.{block}.ffn_{part}_exps.weight"

    def _tensor(self, name):
        t = self.tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.path}: missing tensor {name!r}")
        return t

    def _format(self, name, t):
        type_name = t.tensor_type.name
        if type_name in NOT_READ:
            raise GGUFError(f"{self.path}: tensor {name!r} is stored as {not_read(type_name)}")
        return qformat(type_name)

    def quantized(self, name, shape, device) -> QuantizedWeight:
        """Tensor `name` as a QuantizedWeight of logical shape [E, N, n_in], its bytes copied
        to `device` once. Raises GGUFError naming the tensor when it is missing, of an unknown
        type or of another shape."""
        t = self._tensor(name)
        fmt = self._format(name, t)
        logical = tuple(int(d) for d in reversed(t.shape.tolist()))
        if logical != tuple(shape):
            raise GGUFError(f"{self.path}: tensor {name!r} has shape {list(logical)}, expected "
                            f"{list(shape)} from the file's metadata")
        blocks = self._read_bytes(name, t).reshape(shape[0], shape[1], -1).to(device)
        return QuantizedWeight(blocks, fmt, shape[2])

    def _read_bytes(self, name, t) -> torch.Tensor:
        """Tensor `t`'s bytes read from the file into a new uint8 tensor: a read, not a copy out
        of the memory map, whose touched pages would stay in the process's RSS (as much again as
        the experts) for as long as the file is open."""
        out = torch.empty(int(t.n_bytes), dtype=torch.uint8)
        with open(self.path, "rb") as fh:
            fh.seek(int(t.data_offset))
            got = fh.readinto(out.numpy())
        if got != out.numel():
            raise GGUFError(f"{self.path}: tensor {name!r} is cut short ({got} of {out.numel()} "
                            f"bytes)")
        return out

    def dense(self, name, shape, dtype, device) -> torch.Tensor:
        """Tensor `name` as floats of logical shape `shape` (dequantized if stored quantized)."""
        t = self._tensor(name)
        fmt = self._format(name, t)
        logical = tuple(int(d) for d in reversed(t.shape.tolist()))
        if int(np.prod(logical)) != int(np.prod(shape)):
            raise GGUFError(f"{self.path}: tensor {name!r} has shape {list(logical)}, expected "
                            f"{list(shape)}")
        n_in = logical[-1]
        data = torch.from_numpy(np.ascontiguousarray(t.data).view(np.uint8).copy())
        rows = data.reshape(-1, data.numel() // max(1, int(np.prod(logical[:-1]))))
        values = dequantize_reference(rows, fmt, n_in)
        return values.reshape(shape).to(device=device, dtype=dtype)

    def experts(self, block, device, dtype=torch.float32):
        """The experts of MoE block `block` on `device`, as torch_argon.quant.build_experts
        makes them: QuantizedExperts over the file's blocks, or DenseExperts in `dtype` when the
        file stores them as plain floats (F32 / F16 / BF16)."""
        c = self.config
        E, H, I = c.n_experts, c.hidden, c.inter
        down = self.quantized(self._expert_name(block, "down"), (E, H, I), device)
        fused = self._expert_name(block, "gate_up")
        if fused in self.tensors:
            return build_experts(down, gate_up=self.quantized(fused, (E, 2 * I, H), device),
                                 float_dtype=dtype)
        gate = self.quantized(self._expert_name(block, "gate"), (E, I, H), device)
        up = self.quantized(self._expert_name(block, "up"), (E, I, H), device)
        return build_experts(down, gate=gate, up=up, float_dtype=dtype)

    def moe_layer(self, block, *, device="cpu", dtype=torch.float32, tile_m=None,
                  activation_quant="auto") -> MoE:
        """MoE block `block` as a torch_argon.nn.MoE on `device`: the router (and shared expert)
        in `dtype`, the experts in their GGUF blocks (or, stored as plain floats, as `dtype`
        stacks). activation_quant: the layer option (nn.MoE)."""
        c = self.config
        if block not in c.moe_blocks:
            raise GGUFError(f"{self.path}: block {block} has no experts (MoE blocks: "
                            f"{list(c.moe_blocks)})")
        kw = dict(device=device, dtype=dtype)
        with torch.device("meta"):
            router = TopKRouter(c.hidden, c.n_experts, c.top_k, scoring=c.scoring,
                                renormalize=c.renormalize)
        router.weight = torch.nn.Parameter(
            self.dense(f"blk.{block}.ffn_gate_inp.weight", (c.n_experts, c.hidden), **kw),
            requires_grad=False)
        shared = shared_gate = None
        prefix = f"blk.{block}.ffn_"
        if f"{prefix}down_shexp.weight" in self.tensors:
            Is = c.shared_inter or self._tensor(f"{prefix}down_shexp.weight").shape[0]
            with torch.device("meta"):
                shared = SwiGLUMLP(c.hidden, int(Is))
            for lin, name, shape in ((shared.gate_proj, "gate_shexp", (Is, c.hidden)),
                                     (shared.up_proj, "up_shexp", (Is, c.hidden)),
                                     (shared.down_proj, "down_shexp", (c.hidden, Is))):
                lin.weight = torch.nn.Parameter(self.dense(f"{prefix}{name}.weight", shape, **kw),
                                                requires_grad=False)
            if f"{prefix}gate_inp_shexp.weight" in self.tensors:
                shared_gate = torch.nn.Linear(c.hidden, 1, bias=False, device="meta")
                shared_gate.weight = torch.nn.Parameter(
                    self.dense(f"{prefix}gate_inp_shexp.weight", (1, c.hidden), **kw),
                    requires_grad=False)
        return MoE.from_modules(router, experts_module(self.experts(block, device, dtype)),
                                shared, shared_gate, tile_m=tile_m,
                                activation_quant=activation_quant)

    def moe_layers(self, *, device="cpu", dtype=torch.float32, blocks=None, tile_m=None,
                   activation_quant="auto"):
        """{block index: nn.MoE} for every MoE block (or those in `blocks`)."""
        return {b: self.moe_layer(b, device=device, dtype=dtype, tile_m=tile_m,
                                  activation_quant=activation_quant)
                for b in (self.config.moe_blocks if blocks is None else blocks)}

    def expert_bytes(self, block) -> int:
        """Bytes of block `block`'s expert tensors as stored."""
        names = [self._expert_name(block, p) for p in ("gate", "up", "down", "gate_up")]
        return sum(int(self.tensors[n].n_bytes) for n in names if n in self.tensors)


def load_moe_layers(path, *, device="cpu", dtype=torch.float32, blocks=None, tile_m=None,
                    activation_quant="auto"):
    """The MoE blocks of a GGUF file as {block index: torch_argon.nn.MoE} (see GGUFMoE)."""
    return GGUFMoE(path).moe_layers(device=device, dtype=dtype, blocks=blocks, tile_m=tile_m,
                                    activation_quant=activation_quant)
