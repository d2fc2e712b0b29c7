"""Python API over torch.ops.argon.*, and the fake (meta) impls that let torch.compile trace it.

`OpSet` holds the public functions for one op library: `argon` (dispatched by device), or a test
module's (`argon_host`: the .metal kernels on host threads). The package exports the `argon` set.
"""
from types import SimpleNamespace
from typing import Optional

import torch

from . import _C
from ._shapes import META_N_BAD_IDS, META_SIZE, plan_rows
from .plan import MoEPlan
from .quant import dequantize_reference, qformat
from .quant.activation_q8 import check_activation_quant

# The op libraries with fakes and the eager plan fast path: `argon`, and those a test module
# adds (add_library: torch_argon._C_test's argon_host, loaded by torch_argon.testing.backends).
LIBRARIES = ["argon"]
# The ops of the C++ op table (csrc/op_table.h): each functional form, then its _out form.
FUNCTIONAL_OPS = _C.op_names()
OP_NAMES = tuple(n for name in FUNCTIONAL_OPS for n in (name, f"{name}_out"))


def check_one_device(op_name: str, args, kwargs=None) -> None:
    """Raises a ValueError, worded as the C++ checks word it, if the tensor arguments of a call
    of argon op `op_name` are not all on one device: the fakes run for meta tensors, and a real
    tensor mixed with a meta one would otherwise get no kernel that writes it."""
    schema = getattr(torch.ops.argon, op_name).default._schema
    named = dict(zip((a.name for a in schema.arguments), args))
    named.update(kwargs or {})
    first = None
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            continue
        if first is None:
            first = t.device
        elif t.device != first:
            raise ValueError(f"{name} must be on {first} like the other tensors of the call, "
                             f"got {t.device}")


def _register_fakes(lib: str) -> None:
    def fake(name):
        register = torch.library.register_fake(f"{lib}::{name}")

        def checked(fn):
            def fake_impl(*args, **kwargs):
                check_one_device(name, args, kwargs)
                return fn(*args, **kwargs)
            return register(fake_impl)
        return checked

    @fake("moe_plan")
    def _(topk_ids, topk_weights, n_expert, tile_m):
        T, K = topk_ids.shape
        R = plan_rows(T, K, n_expert, tile_m)
        i32 = dict(dtype=torch.int32, device=topk_ids.device)
        return (
            topk_ids.new_empty((n_expert,), **i32),
            topk_ids.new_empty((n_expert + 1,), **i32),
            topk_ids.new_empty((R,), **i32),
            topk_ids.new_empty((R,), dtype=torch.float32),
            topk_ids.new_empty((T, K), **i32),
            topk_ids.new_empty((R // tile_m,), **i32),
            topk_ids.new_empty((META_SIZE,), **i32),
        )

    @fake("moe_gather")
    def _(x, sorted_token, out_dtype=None):
        return x.new_empty((sorted_token.shape[0], x.shape[1]), dtype=out_dtype or x.dtype)

    @fake("moe_combine")
    def _(y, pos, topk_weights, shared=None, residual=None, out_dtype=None):
        return y.new_empty((pos.shape[0], y.shape[1]), dtype=out_dtype or y.dtype)

    @fake("swiglu")
    def _(gate, up=None, out_dtype=None, activation="silu"):
        inner = gate.shape[1] if up is not None else gate.shape[1] // 2
        return gate.new_empty((gate.shape[0], inner), dtype=out_dtype or gate.dtype)

    @fake("moe_mm")
    def _(xs, w, tile_expert, tile_m):
        return xs.new_empty((xs.shape[0], w.shape[1]))

    @fake("dequantize")
    def _(w_q, qtype, n_in):
        return w_q.new_empty((*w_q.shape[:-1], n_in), dtype=torch.float32)

    @fake("moe_qmm")
    def _(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant="none"):
        check_activation_quant(activation_quant)
        return xs.new_empty((xs.shape[0], w_q.shape[1]))

    for name in (n for n in OP_NAMES if n.endswith("_out")):
        fake(name)(lambda *args, **kwargs: None)


_register_fakes("argon")
_WITH_FAKES = {"argon"}


def add_library(name: str, plan_fast_path: bool = True) -> None:
    """Registers the fakes of op library `name` (one of a test module's: its schemas are the op
    table's), and with plan_fast_path its eager plan fast path (csrc/plan_fresh.cpp)."""
    if name in _WITH_FAKES:
        return
    _register_fakes(name)
    _WITH_FAKES.add(name)
    if plan_fast_path:
        LIBRARIES.append(name)


def _check_n_expert(n_expert):
    """n_expert as an int the ops take (int64), or a ValueError naming it (the same on every
    backend; a Python int beyond int64 would otherwise fail in the dispatcher's conversion)."""
    if isinstance(n_expert, torch.SymInt):
        return n_expert
    if not isinstance(n_expert, int) or isinstance(n_expert, bool):
        raise ValueError(f"n_expert must be an int, got {type(n_expert).__name__}")
    if n_expert < 1:
        raise ValueError(f"n_expert must be >= 1, got {n_expert}")
    if n_expert > 2**31 - 1:
        raise ValueError(f"n_expert must fit in int32, got {n_expert}")
    return n_expert


def _plan_buffers(out):
    """The seven output tensors of `out=`: a MoEPlan, or a tuple / list of its seven tensors (in
    MoEPlan's field order); anything else is refused before a buffer is written."""
    buffers = tuple(out)[:7] if isinstance(out, (tuple, list)) else ()
    if len(buffers) != 7 or not all(isinstance(t, torch.Tensor) for t in buffers):
        raise ValueError("out must be a MoEPlan or a tuple of its seven tensors (counts, offsets, "
                         "sorted_token, sorted_weight, pos, tile_expert, meta), got "
                         f"{type(out).__name__}")
    return buffers


def _tiles_of(plan, tile_m, op_name):
    """(tile_expert, tile_m) of a grouped GEMM's `plan` argument: a MoEPlan, or a bare
    tile_expert tensor passed with tile_m."""
    if isinstance(plan, MoEPlan):
        return plan.tile_expert, plan.tile_m
    if tile_m is None:
        raise ValueError(f"{op_name}: pass tile_m along with a bare tile_expert tensor")
    return plan, tile_m


class OpSet:
    """The public functions, bound to one op library (a `torch.ops` namespace)."""

    def __init__(self, namespace):
        self.ns = namespace
        # Each op's one overload, looked up once: calling torch.ops.argon.moe_plan resolves
        # the overload on every call, about 1 us of host time (a plain function namespace, such
        # as the reference's, is used as is).
        self.op = SimpleNamespace(**{name: getattr(getattr(namespace, name), "default",
                                                   getattr(namespace, name))
                                     for name in OP_NAMES})
        # Our op libraries have an eager fast path for the functional plan (one allocation for
        # the seven outputs: csrc/plan_fresh.cpp); other namespaces (the reference) do not.
        name = getattr(namespace, "name", None)
        self._fresh_lib = name if name in LIBRARIES else None

    def moe_plan(self, topk_ids, topk_weights, n_expert: int, tile_m: int = 16, *,
                 out: Optional[MoEPlan] = None, check_ids: bool = False) -> MoEPlan:
        """Plan a top-k routing: counts, padded offsets, the stable expert-sorted row of every
        (token, slot) entry, and the tile map. Deterministic; output sizes depend only on
        (T, K, n_expert, tile_m).

        topk_ids: [T, K] int32 or int64, each in [0, n_expert) or -1 (skipped).
        topk_weights: [T, K] float32 / float16 / bfloat16.
        out: a plan to write into (every element is overwritten; a MoEPlan or a tuple of its
            seven tensors). Without it, in eager mode, the
            seven tensors of the new plan are views of one fresh buffer (one allocation instead
            of seven: the call's host time on CUDA drops by about a third); they never overlap.
            Under torch.compile, and for tensor subclasses or inside Python modes, the plan
            comes from the op, seven separate tensors; the values are the same either way.
        check_ids: on devices that count out-of-range ids instead of raising (GPUs), read the
            count back and raise. This syncs with the device; the CPU always raises.
        """
        n_expert = _check_n_expert(n_expert)
        if out is None:
            plan = None
            if self._fresh_lib is not None and not torch.compiler.is_compiling():
                plan = _C.plan_fresh(MoEPlan, self._fresh_lib, topk_ids, topk_weights, n_expert,
                                     tile_m)
            if plan is None:  # compiling, or a case the fast path leaves to the op
                plan = MoEPlan(*self.op.moe_plan(topk_ids, topk_weights, n_expert, tile_m), tile_m)
        else:
            buffers = _plan_buffers(out)
            self.op.moe_plan_out(topk_ids, topk_weights, n_expert, tile_m, *buffers)
            plan = (out if isinstance(out, MoEPlan) and out.tile_m == tile_m
                    else MoEPlan(*buffers, tile_m))
        if check_ids and int(plan.meta[META_N_BAD_IDS]) > 0:
            raise ValueError(
                f"topk_ids holds {int(plan.meta[META_N_BAD_IDS])} ids outside [0, n_expert="
                f"{n_expert}) other than -1; they were treated as -1"
            )
        return plan

    def moe_gather(self, x, plan, *, out_dtype: Optional[torch.dtype] = None, out=None):
        """xs[r] = x[sorted_token[r]] for the plan's rows; zero rows where no token goes.

        plan: a MoEPlan or its sorted_token. out_dtype: convert once (round to nearest even).
        """
        sorted_token = plan.sorted_token if isinstance(plan, MoEPlan) else plan
        if out is None:
            return self.op.moe_gather(x, sorted_token, out_dtype)
        self.op.moe_gather_out(x, sorted_token, out)
        return out

    def moe_combine(self, y, plan, topk_weights, *, shared=None, residual=None,
                    out_dtype: Optional[torch.dtype] = None, out=None):
        """out[t] = sum_k w[t,k] * y[pos[t,k]] (+ shared[t]) (+ residual[t]), accumulated in
        fp32 in ascending k and rounded once.

        plan: a MoEPlan or its pos. y: [R_max, H], the experts' outputs in plan row order.
        """
        pos = plan.pos if isinstance(plan, MoEPlan) else plan
        if out is None:
            return self.op.moe_combine(y, pos, topk_weights, shared, residual, out_dtype)
        self.op.moe_combine_out(y, pos, topk_weights, shared, residual, out)
        return out

    def swiglu(self, gate, up=None, *, out_dtype: Optional[torch.dtype] = None,
               activation: str = "silu", out=None):
        """act(gate) * up in fp32, rounded once. With up=None, gate is [R, 2I]: gate | up.

        activation: "silu" (SwiGLU), "gelu" (erf form) or "gelu_tanh" (GeGLU).
        out: may be gate or up itself (two-tensor form): the product is taken in place.
        """
        if out is None:
            return self.op.swiglu(gate, up, out_dtype, activation)
        self.op.swiglu_out(gate, up, activation, out)
        return out

    def moe_mm(self, xs, w, plan, tile_m: Optional[int] = None, *, out=None):
        """Grouped GEMM over the plan's tiles: out[rows of tile j] = xs[rows] @ w[e]^T with
        e = tile_expert[j]; rows of tiles whose expert is -1 are zero.

        w: [E, N, Kd], any strides (a [E, Kd, N] stack can be passed as w.transpose(1, 2)).
        plan: a MoEPlan, or its tile_expert together with tile_m.
        """
        tile_expert, tile_m = _tiles_of(plan, tile_m, "moe_mm")
        if out is None:
            return self.op.moe_mm(xs, w, tile_expert, tile_m)
        self.op.moe_mm_out(xs, w, tile_expert, tile_m, out)
        return out


    def dequantize(self, w_q, qtype, n_in: int, *, out=None):
        """float32 [..., N, n_in] from GGUF blocks w_q (uint8 [..., N, row_bytes]), bit for bit
        as torch_argon.quant.dequantize_reference (and the gguf package's dequantize).

        qtype: a GGUF type name ("Q4_K"), a gguf.GGMLQuantizationType or its int value. The
        plain float types (F32, F16, BF16) are a reinterpretation of the bytes, done by the
        reference, not a kernel. out: a contiguous float32 buffer of the result's shape.
        """
        fmt = qformat(qtype)
        if fmt.is_float:
            result = dequantize_reference(w_q, fmt, n_in)
            return result if out is None else out.copy_(result)
        if out is None:
            return self.op.dequantize(w_q, fmt.type_id, n_in)
        self.op.dequantize_out(w_q, fmt.type_id, n_in, out)
        return out

    def moe_qmm(self, xs, w_q, qtype, n_in: int, plan, tile_m: Optional[int] = None, *,
                activation_quant: str = "none", out=None):
        """Grouped GEMM over the plan's tiles with quantized expert weights: out[rows of tile j]
        = xs[rows] @ dequantize(w_q[e])^T with e = tile_expert[j], accumulated in fp32 and
        rounded once to xs's dtype; rows of tiles whose expert is -1 are zero. The dequantized
        weights never exist in memory: each kernel dequantizes a tile at a time.

        xs: [R, n_in] float32 / float16 / bfloat16 (the plan's rows, e.g. moe_gather's output).
        w_q: uint8 [E, N, row_bytes], the GGUF blocks of E experts (each row one output feature).
        qtype: a GGUF type name ("Q4_K"), a gguf.GGMLQuantizationType or its int value.
        plan: a MoEPlan, or its tile_expert together with tile_m.
        activation_quant: "none" (the exact-dequant product) or "q8" (xs rounded per row to
        8-bit blocks first, then integer dot products: torch_argon/quant/activation_q8.py;
        docs/contract.md says which backends have it and how close it stays).
        """
        fmt = qformat(qtype)
        tile_expert, tile_m = _tiles_of(plan, tile_m, "moe_qmm")
        if out is None:
            return self.op.moe_qmm(xs, w_q, fmt.type_id, n_in, tile_expert, tile_m,
                                   activation_quant)
        self.op.moe_qmm_out(xs, w_q, fmt.type_id, n_in, tile_expert, tile_m, activation_quant,
                            out)
        return out


argon_ops = OpSet(torch.ops.argon)
