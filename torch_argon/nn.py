"""torch_argon.nn.MoE: a sparse MoE block (router, SwiGLU experts, optional gated shared expert)
that runs on the argon ops, with parameter names and layouts of transformers' MoE blocks, so a
block's state_dict loads as is and integrations can wrap a model's own modules without copies.

Trains: the argon ops' backward formulas (torch_argon/autograd.py) give x, the router, the expert
stacks and the shared expert their gradients; torch.compile(fullgraph=True) traces forward and
backward.
"""
from typing import Optional

import torch
from torch import nn

from .experts.arguments import check_options
from .layer import moe_experts, shared_expert
from .ops import argon_ops, OpSet
from .routing import SCORINGS, route
from .weights import DenseExperts


class TopKRouter(nn.Module):
    """logits = x @ weight^T; scores by softmax or sigmoid (fp32); top-k; optional
    renormalisation. forward returns (logits, weights, ids), as transformers' routers do."""

    def __init__(self, hidden_size, n_experts, top_k, *, scoring="softmax", renormalize=False,
                 device=None, dtype=None):
        super().__init__()
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
        self.top_k, self.scoring, self.renormalize = top_k, scoring, renormalize
        self.weight = nn.Parameter(torch.empty(n_experts, hidden_size, device=device, dtype=dtype))
        nn.init.normal_(self.weight, std=hidden_size ** -0.5)

    def forward(self, x):
        ids, weights, logits = route(x, self.weight, self.top_k, scoring=self.scoring,
                                     renormalize=self.renormalize, return_logits=True)
        return logits, weights, ids

    def extra_repr(self):
        return f"top_k={self.top_k}, scoring={self.scoring}, renormalize={self.renormalize}"


class ExpertWeightsModule(nn.Module):
    """A module holding expert weights as its tensors, which hands the layer one expert-weights
    object (`expert_weights()`), built and validated once: at construction, and again only when
    the tensors it was built from change: after `.to()` / `.cuda()` / `.half()` / `to_empty()`
    (nn.Module._apply, which replaces buffers and the data of parameters) and after one of
    WEIGHT_ATTRIBUTES is assigned (load_state_dict(assign=True) included). load_state_dict's
    usual in-place copy keeps the same tensors, so the object stays valid. A forward reads it
    as it is: no rebuilding, no re-validation per call."""

    WEIGHT_ATTRIBUTES = ()  # the attributes the object is built from

    def build_expert_weights(self):
        """The expert-weights object over this module's current tensors."""
        raise NotImplementedError

    def expert_weights(self):
        weights = self.__dict__.get("_expert_weights")
        if weights is None:
            weights = self.__dict__["_expert_weights"] = self.build_expert_weights()
        return weights

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.__dict__["_expert_weights"] = self.build_expert_weights()
        return out

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in self.WEIGHT_ATTRIBUTES:
            self.__dict__["_expert_weights"] = None  # built again at the next use

    def __getstate__(self):
        # A copy or an unpickled module builds its own object over its own tensors (a view of
        # a parameter that requires grad would not deepcopy).
        state = super().__getstate__()
        state.pop("_expert_weights", None)
        return state


class Experts(ExpertWeightsModule):
    """E SwiGLU experts stored as two stacks, with transformers' names:
    gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows) and down_proj [E, H, I].
    With is_transposed=True they are stored [E, H, 2I] and [E, I, H] instead (checkpoints that
    keep x @ W layouts) and handed to moe_mm as transposed views, never copied.
    """

    WEIGHT_ATTRIBUTES = ("gate_up_proj", "down_proj")

    def __init__(self, n_experts, hidden_size, intermediate_size, *, is_transposed=False,
                 device=None, dtype=None):
        super().__init__()
        E, H, I = n_experts, hidden_size, intermediate_size
        self.is_transposed = is_transposed
        gate_up, down = ((E, H, 2 * I), (E, I, H)) if is_transposed else ((E, 2 * I, H), (E, H, I))
        kw = dict(device=device, dtype=dtype)
        self.gate_up_proj = nn.Parameter(torch.empty(gate_up, **kw))
        self.down_proj = nn.Parameter(torch.empty(down, **kw))
        nn.init.normal_(self.gate_up_proj, std=H ** -0.5)
        nn.init.normal_(self.down_proj, std=I ** -0.5)
        self.expert_weights()

    @classmethod
    def from_weights(cls, weights: DenseExperts, *, requires_grad=False):
        """An Experts module holding a DenseExperts' stacks as its parameters (not copied)."""
        E, H, I = weights.n_experts, weights.hidden, weights.inter
        self = cls(E, H, I, device="meta")
        self.gate_up_proj = nn.Parameter(weights.gate_up, requires_grad=requires_grad)
        self.down_proj = nn.Parameter(weights.down, requires_grad=requires_grad)
        self.expert_weights()
        return self

    @classmethod
    def from_per_expert(cls, modules, names=None):
        """Stacks per-expert MLP modules (nn.Linear gate, up, down: Mixtral's w1/w3/w2, or
        gate_proj/up_proj/down_proj) ONCE, then points each module's weight at its view of the
        stacks: the model keeps working through its modules, any later load_state_dict into
        them writes into the stacks, and the memory is not doubled once the old per-expert
        tensors are freed. (To never hold both, patch before loading the checkpoint.)

        names: (gate, up, down) attribute names; found automatically for the two usual sets.
        """
        modules = list(modules)
        if names is None:
            names = next((n for n in (("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj"))
                          if all(hasattr(modules[0], a) for a in n)), None)
            if names is None:
                raise ValueError("per-expert modules need w1/w3/w2 or gate_proj/up_proj/down_proj "
                                 "linears; pass names=(gate, up, down)")
        first_gate, _, first_down = (getattr(modules[0], n).weight for n in names)
        I, H = first_gate.shape
        self = cls(len(modules), H, I, device="meta")
        kw = dict(device=first_gate.device, dtype=first_gate.dtype)
        gate_up = torch.empty(len(modules), 2 * I, H, **kw)
        down = torch.empty(len(modules), H, I, **kw)
        with torch.no_grad():
            for e, module in enumerate(modules):
                gate, up, dn = (getattr(module, n) for n in names)
                for linear, view in ((gate, gate_up[e, :I]), (up, gate_up[e, I:]), (dn, down[e])):
                    has_bias = getattr(linear, "bias", None) is not None
                    if linear.weight.shape != view.shape or has_bias:
                        raise ValueError(f"expert {e}: {linear} does not fit a bias-free "
                                         f"[{view.shape[0]}, {view.shape[1]}] projection")
                    view.copy_(linear.weight)
                    linear.weight = nn.Parameter(view, requires_grad=linear.weight.requires_grad)
        self.gate_up_proj = nn.Parameter(gate_up, requires_grad=first_gate.requires_grad)
        self.down_proj = nn.Parameter(down, requires_grad=first_down.requires_grad)
        self.expert_weights()
        return self

    def build_expert_weights(self) -> DenseExperts:
        """The stacks as the layer takes them (views: [E, 2I, H] and [E, H, I])."""
        return dense_stacks(self)

    def extra_repr(self):
        return f"gate_up_proj={tuple(self.gate_up_proj.shape)}, is_transposed={self.is_transposed}"


class QuantExperts(ExpertWeightsModule):
    """E gated experts whose weights stay quantized (GGUF blocks): uint8 buffers
    `gate_up_blocks` (or `gate_blocks` and `up_blocks`) and `down_blocks`, so `.to(device)` and
    state_dict carry the packed bytes; `expert_weights()` gives the QuantizedExperts the layer
    runs (torch_argon.quant.weights), over these buffers."""

    PARTS = ("gate_up", "gate", "up", "down")
    WEIGHT_ATTRIBUTES = tuple(f"{part}_blocks" for part in PARTS) + ("activation_quant",)

    def __init__(self, weights):
        super().__init__()
        self._formats = {}
        self.activation_quant = weights.activation_quant
        for part, w in weights.parts().items():
            self.register_buffer(f"{part}_blocks", w.data)
            self._formats[part] = (w.qtype, w.n_in)
        self.expert_weights()

    def build_expert_weights(self):
        from .quant.weights import QuantizedExperts, QuantizedWeight
        return QuantizedExperts(**{part: QuantizedWeight(getattr(self, f"{part}_blocks"), *fmt)
                                   for part, fmt in self._formats.items()},
                                activation_quant=self.activation_quant)

    def extra_repr(self):
        return ", ".join(f"{part}={fmt[0].name} [{tuple(getattr(self, part + '_blocks').shape)}]"
                         for part, fmt in self._formats.items())


def experts_module(weights):
    """The experts module holding an expert-weights object's tensors (not copied): Experts for
    DenseExperts (frozen parameters), QuantExperts for QuantizedExperts."""
    if weights.kind == "dense":
        return Experts.from_weights(weights)
    return QuantExperts(weights)


def expert_weights(experts):
    """The expert-weights object of an experts module: its own `expert_weights()` where it has
    one (ours, quantized ones), else DenseExperts over views of gate_up_proj [E, 2I, H] and
    down_proj [E, H, I] (transformers' experts modules; is_transposed honoured)."""
    own = getattr(experts, "expert_weights", None)
    return own() if callable(own) else dense_stacks(experts)


def dense_stacks(experts):
    """DenseExperts over views of a module's gate_up_proj / down_proj stacks."""
    if getattr(experts, "is_transposed", False):
        return DenseExperts(experts.gate_up_proj.transpose(1, 2),
                            experts.down_proj.transpose(1, 2))
    return DenseExperts(experts.gate_up_proj, experts.down_proj)


class SwiGLUMLP(nn.Module):
    """A dense gated MLP (the shared expert): down(act(gate(x)) * up(x)), act silu by default."""

    def __init__(self, hidden_size, intermediate_size, *, activation="silu", device=None,
                 dtype=None):
        super().__init__()
        self.activation = activation
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x):
        return shared_expert(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight,
                             activation=self.activation)


class MoE(nn.Module):
    """A sparse MoE block on x [..., H]: router -> top-k -> plan -> gather -> gate/up moe_mm ->
    SwiGLU (or GeGLU: `activation`) -> down moe_mm -> combine (+ sigmoid-gated shared expert)
    (+ residual).

    Submodules carry transformers' names (gate, experts, shared_expert, shared_expert_gate), so
    a Qwen3-MoE / Qwen3-Next / Mixtral / OLMoE block's state_dict loads into it unchanged.

    Expert parallel: with process_group=group the experts are split over the group's ranks
    (torch_argon.distributed): this module holds only its rank's share of the experts
    (distributed.local_expert_range; the router keeps all n_experts rows) and every rank of the
    group calls forward together. ep_mode ("auto", "all_to_all", "no_sync") and ep_tokens
    ("sharded": each rank's own tokens; "replicated": the same tokens on every rank) are passed
    to distributed.ep_moe_experts.

    activation_quant: "auto", "none" or "q8": whether quantized experts quantize the
    activations to 8-bit blocks (layer.moe_experts; "auto": the experts' own setting).
    """

    def __init__(self, hidden_size, intermediate_size, n_experts, top_k, *, scoring="softmax",
                 renormalize=False, shared_intermediate_size=None, shared_expert_gate=True,
                 is_transposed=False, tile_m=None, ops: Optional[OpSet] = None,
                 activation="silu", device=None, dtype=None, process_group=None,
                 ep_mode="auto", ep_tokens="sharded", activation_quant="auto"):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self._set_options(tile_m, ops, activation, activation_quant)
        self._set_parallel(n_experts, process_group, ep_mode, ep_tokens)
        self.gate = TopKRouter(hidden_size, n_experts, top_k, scoring=scoring,
                               renormalize=renormalize, **kw)
        held = n_experts
        if process_group is not None:
            from .distributed import local_expert_range
            start, end = local_expert_range(n_experts, process_group)
            held = end - start
        self.experts = Experts(held, hidden_size, intermediate_size,
                               is_transposed=is_transposed, **kw)
        self.shared_expert = self.shared_expert_gate = None
        if shared_intermediate_size:
            self.shared_expert = SwiGLUMLP(hidden_size, shared_intermediate_size,
                                           activation=activation, **kw)
            if shared_expert_gate:
                self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False, **kw)

    def _set_options(self, tile_m, ops, activation, activation_quant):
        check_options(activation, activation_quant)
        self.tile_m, self.ops = tile_m, ops or argon_ops
        self.activation, self.activation_quant = activation, activation_quant

    def _set_parallel(self, n_experts, process_group, ep_mode, ep_tokens):
        self.n_experts, self.process_group = n_experts, process_group
        self.ep_mode, self.ep_tokens = ep_mode, ep_tokens

    @classmethod
    def from_modules(cls, gate, experts, shared_expert=None, shared_expert_gate=None, *,
                     tile_m=None, ops: Optional[OpSet] = None, activation="silu",
                     process_group=None, ep_mode="auto", ep_tokens="sharded", n_experts=None,
                     activation_quant="auto"):
        """Wraps existing modules, sharing their parameters (nothing is copied).

        gate: a router whose forward(x [T, H]) returns (logits, weights [T, K], ids [T, K]).
        experts: a module with gate_up_proj / down_proj stacks or an expert_weights() method
            (see expert_weights).
        shared_expert: a module with gate_proj / up_proj / down_proj linears, or None.
        shared_expert_gate: an nn.Linear(H, 1) whose sigmoid scales the shared expert, or None.
        activation: of the experts' and the shared expert's gated epilogue ("silu", "gelu",
            "gelu_tanh").
        process_group, ep_mode, ep_tokens: expert parallel (see the class); `experts` then holds
            all n_experts experts (this rank's share is taken as views) or only this rank's.
        n_experts: the router's expert count (default: the rows of gate.weight).
        activation_quant: see the class.
        """
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._set_options(tile_m, ops, activation, activation_quant)
        if n_experts is None and process_group is not None:
            n_experts = gate.weight.shape[0]
        self._set_parallel(n_experts, process_group, ep_mode, ep_tokens)
        self.gate, self.experts = gate, experts
        self.shared_expert, self.shared_expert_gate = shared_expert, shared_expert_gate
        return self

    def forward(self, x, residual=None):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        _, weights, ids = self.gate(x)
        experts = expert_weights(self.experts)
        shared = None
        if self.shared_expert is not None:
            s = self.shared_expert
            gate = self.shared_expert_gate
            gate_weight = None if gate is None else gate.weight
            shared = shared_expert(x, s.gate_proj.weight, s.up_proj.weight, s.down_proj.weight,
                                   gate_weight, ops=self.ops, activation=self.activation)
        if residual is not None:
            residual = residual.reshape(x.shape)
        if self.process_group is None:
            out = moe_experts(x, ids, weights, experts, tile_m=self.tile_m, shared=shared,
                              residual=residual, ops=self.ops, activation=self.activation,
                              activation_quant=self.activation_quant)
        else:
            from .distributed import ep_moe_experts
            out = ep_moe_experts(x, ids, weights, experts, n_experts=self.n_experts,
                                 group=self.process_group, mode=self.ep_mode,
                                 tokens=self.ep_tokens, tile_m=self.tile_m, shared=shared,
                                 residual=residual, ops=self.ops, activation=self.activation,
                                 activation_quant=self.activation_quant)
        return out.reshape(shape)

    def extra_repr(self):
        text = f"tile_m={self.tile_m}, activation={self.activation}"
        if self.activation_quant != "auto":
            text += f", activation_quant={self.activation_quant}"
        if self.process_group is None:
            return text
        return (f"{text}, n_experts={self.n_experts}, expert parallel "
                f"(mode={self.ep_mode}, tokens={self.ep_tokens})")
