"""Python API over torch.ops.argon.*, and the fake (meta) impls that let torch.compile trace it.

`OpSet` holds the public functions for one op library: `argon` (dispatched by device), or a test
module's (`argon_host`: the .metal kernels on host threads). The package exports the `argon` set.
"""
import operator
from types import SimpleNamespace
from typing import Optional

import torch

from . import _C
from ._shapes import META_N_BAD_IDS
from .plan import MoEPlan
from .quant import dequantize_reference, qformat

# The op libraries with fakes and the eager plan fast path: `argon`, and those a test module
# adds (add_library: torch_argon._C_test's argon_host, loaded by torch_argon.testing.backends).
LIBRARIES = ["argon"]
# The ops of the C++ op table (csrc/op_table.h): each functional form, then its _out form.
FUNCTIONAL_OPS = _C.op_names()
OP_NAMES = tuple(n for name in FUNCTIONAL_OPS for n in (name, f"{name}_out"))


def _every_argument(schema, args, kwargs):
    """A call's arguments, all of the schema's in its order: the dispatcher may leave out
    trailing arguments that have their default value."""
    full = list(args)
    for arg in schema.arguments[len(args):]:
        full.append(kwargs[arg.name] if arg.name in kwargs else arg.default_value)
    return full


def _register_fakes(lib: str) -> None:
    """The fake (meta) implementation of every op of library `lib`: the C++ functional form with
    the checks in place of the kernel, and the _out form's checks (csrc/python_checks.cpp), so
    meta and fake tensors meet the kernels' own checks and output shapes, and a call the kernels
    would refuse fails while torch.compile traces, with the same exception and message."""
    namespace = getattr(torch.ops, lib)
    for name in OP_NAMES:
        schema = getattr(namespace, name).default._schema
        meta_form = getattr(_C.meta, name)

        def fake(*args, _schema=schema, _meta_form=meta_form, **kwargs):
            return _meta_form(*_every_argument(_schema, args, kwargs))

        torch.library.register_fake(f"{lib}::{name}")(fake)


_register_fakes("argon")
_WITH_FAKES = {"argon"}


def _register_formulas(lib: str) -> None:
    from .autograd import register_formulas  # it builds an OpSet: defined below

    register_formulas(lib)


def add_library(name: str, plan_fast_path: bool = True) -> None:
    """Registers the fakes of op library `name` (one of a test module's: its schemas are the op
    table's), and with plan_fast_path its eager plan fast path (csrc/plan_fresh.cpp)."""
    if name in _WITH_FAKES:
        return
    _register_fakes(name)
    _register_formulas(name)
    _WITH_FAKES.add(name)
    if plan_fast_path:
        LIBRARIES.append(name)


@torch.library.custom_op("argon::_check_float_dequantize_out", mutates_args=())
def _check_float_dequantize_out(w_q: torch.Tensor, n_in: int, out: torch.Tensor) -> None:
    """The kernels' check of dequantize's out= (csrc/checks.cpp), for the plain float formats,
    which the Python API reinterprets without a kernel. An op, so that torch.compile traces it
    and runs it on fake tensors (its fake is the check too): a misfit out fails while tracing."""
    _C.checks.dequantize_buffer(w_q, n_in, out)


_check_float_dequantize_out.register_fake(_C.checks.dequantize_buffer)


def refuse_gradients(op):
    """Gives an op defined with torch.library.custom_op (the Triton GEMMs) the autograd of every
    argon op (csrc/autograd_skip.cpp): in grad mode, an argument that requires grad raises the
    same NotImplementedError, instead of an output whose backward fails later. custom_op's
    autograd offers no hook before its kernel runs: setup_context, the first, raises."""
    schema = op._opoverload._schema
    names = [arg.name for arg in schema.arguments]

    def setup_context(ctx, inputs, output):
        for name, value in zip(names, inputs):
            if isinstance(value, torch.Tensor) and value.requires_grad:
                _C.refuse_gradient(schema.name, name)

    def backward(ctx, *grads):
        raise AssertionError("unreachable: setup_context refuses every call that records a graph")

    op.register_autograd(backward, setup_context=setup_context)


class _NoAutograd:
    """The ops' calls below the Autograd key where autograd records nothing, so the backward
    formulas' kernel (a Python function, torch.library.register_autograd) is not entered: it
    cost about 6 us of host time per call on this project's 2-core host (swiglu on a [4, 16]
    tensor: 11.6 us under no_grad against 4.0 under inference_mode). Under torch.compile the
    calls go through autograd as traced."""

    @staticmethod
    def applies(*tensors) -> bool:
        """Whether autograd would record nothing for a call on `tensors` (None allowed)."""
        if torch.compiler.is_compiling():
            return False
        if not torch.is_grad_enabled():
            return True
        return not any(t is not None and t.requires_grad for t in tensors)

    guard = torch._C._AutoDispatchBelowAutograd


def _as_int(value, name):
    """An integer argument of the Python API as a Python int: any integer type (numpy.int64 and
    other types with __index__) is taken; a bool, a float or a value beyond int64 (which the
    ops' int arguments cannot carry) is a ValueError naming the argument. Ranges are the ops'
    checks."""
    if type(value) is int and -2**63 <= value < 2**63:  # the common case, first (host time)
        return value
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    value = operator.index(value)
    if not -2**63 <= value < 2**63:
        raise ValueError(f"{name} must fit in int64, got {value}")
    return value


def _check_out_dtype(out, out_dtype):
    """out_dtype, where given with out=, must be out's dtype (the result is written in out's)."""
    if out is not None and out_dtype is not None and out.dtype != out_dtype:
        raise ValueError(f"out_dtype is {out_dtype} but out is {out.dtype}: the result is "
                         "written in out's dtype (pass one of the two, or make them agree)")


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
    return plan, _as_int(tile_m, "tile_m")


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
        n_expert = _as_int(n_expert, "n_expert")
        tile_m = _as_int(tile_m, "tile_m")
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
        _check_out_dtype(out, out_dtype)
        if out is None:
            if _NoAutograd.applies(x):
                with _NoAutograd.guard():
                    return self.op.moe_gather(x, sorted_token, out_dtype)
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
        _check_out_dtype(out, out_dtype)
        if out is None:
            if _NoAutograd.applies(y, topk_weights, shared, residual):
                with _NoAutograd.guard():
                    return self.op.moe_combine(y, pos, topk_weights, shared, residual, out_dtype)
            return self.op.moe_combine(y, pos, topk_weights, shared, residual, out_dtype)
        self.op.moe_combine_out(y, pos, topk_weights, shared, residual, out)
        return out

    def swiglu(self, gate, up=None, *, out_dtype: Optional[torch.dtype] = None,
               activation: str = "silu", out=None):
        """act(gate) * up in fp32, rounded once. With up=None, gate is [R, 2I]: gate | up.

        activation: "silu" (SwiGLU), "gelu" (erf form) or "gelu_tanh" (GeGLU).
        out: may be gate or up itself (two-tensor form): the product is taken in place.
        """
        _check_out_dtype(out, out_dtype)
        if out is None:
            if _NoAutograd.applies(gate, up):
                with _NoAutograd.guard():
                    return self.op.swiglu(gate, up, out_dtype, activation)
            return self.op.swiglu(gate, up, out_dtype, activation)
        self.op.swiglu_out(gate, up, activation, out)
        return out

    def swiglu_backward(self, grad_out, gate, up=None, *, activation: str = "silu", out=None):
        """The gradient of swiglu's inputs: [R, 2I] in gate's dtype, d gate | d up, with
        d gate = grad_out * up * act'(gate) and d up = grad_out * act(gate), in fp32, each
        rounded once. gate / up as swiglu takes them; grad_out [R, I] of any float dtype."""
        if out is None:
            return self.op.swiglu_backward(grad_out, gate, up, activation)
        self.op.swiglu_backward_out(grad_out, gate, up, activation, out)
        return out

    def moe_mm_weight_grad(self, xs, grad_out, plan, n_expert: int,
                           tile_m: Optional[int] = None, *, out=None):
        """The gradient of moe_mm's weights: out[e] = sum over the rows r of the tiles of
        expert e of grad_out[r]^T xs[r], [E, N, Kd] in xs's dtype (moe_mm's w layout),
        accumulated in fp32 in a fixed order (no atomics: the same bytes run to run) and rounded
        once; experts without tiles get zeros.

        plan: a MoEPlan, or its tile_expert together with tile_m.
        """
        tile_expert, tile_m = _tiles_of(plan, tile_m, "moe_mm_weight_grad")
        n_expert = _as_int(n_expert, "n_expert")
        if out is None:
            return self.op.moe_mm_weight_grad(xs, grad_out, tile_expert, tile_m, n_expert)
        self.op.moe_mm_weight_grad_out(xs, grad_out, tile_expert, tile_m, n_expert, out)
        return out

    def moe_mm(self, xs, w, plan, tile_m: Optional[int] = None, *, out=None):
        """Grouped GEMM over the plan's tiles: out[rows of tile j] = xs[rows] @ w[e]^T with
        e = tile_expert[j]; rows of tiles whose expert is -1 are zero.

        w: [E, N, Kd], any strides (a [E, Kd, N] stack can be passed as w.transpose(1, 2)).
        plan: a MoEPlan, or its tile_expert together with tile_m.
        """
        tile_expert, tile_m = _tiles_of(plan, tile_m, "moe_mm")
        if out is None:
            if _NoAutograd.applies(xs, w):
                with _NoAutograd.guard():
                    return self.op.moe_mm(xs, w, tile_expert, tile_m)
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
        n_in = _as_int(n_in, "n_in")
        if fmt.is_float:  # the reference checks w_q; out gets the kernels' check of out=
            result = dequantize_reference(w_q, fmt, n_in)
            if out is None:
                return result
            _check_float_dequantize_out(w_q, n_in, out)
            return out.copy_(result)
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
        n_in = _as_int(n_in, "n_in")
        tile_expert, tile_m = _tiles_of(plan, tile_m, "moe_qmm")
        if out is None:
            if _NoAutograd.applies(xs):
                with _NoAutograd.guard():
                    return self.op.moe_qmm(xs, w_q, fmt.type_id, n_in, tile_expert, tile_m,
                                           activation_quant)
            return self.op.moe_qmm(xs, w_q, fmt.type_id, n_in, tile_expert, tile_m,
                                   activation_quant)
        self.op.moe_qmm_out(xs, w_q, fmt.type_id, n_in, tile_expert, tile_m, activation_quant,
                            out)
        return out


argon_ops = OpSet(torch.ops.argon)
_register_formulas("argon")
