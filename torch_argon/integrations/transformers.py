"""Run the sparse MoE blocks of a transformers model on the torch_argon ops, and back.

    from torch_argon.integrations import transformers as argon_hf
    report = argon_hf.patch(model)    # a list of the qualified names of the blocks patched
    report.skipped                    # {name: why} for supported blocks left as they were
    model.generate(...)
    argon_hf.unpatch(model)

What patching does to a block: the block object stays where it is, with its own submodules
(`gate` router, `experts` gate_up_proj / down_proj stacks, `shared_expert` /
`shared_expert_gate` where the block has them); only its class changes, to a subclass of its
own class (made once per class: `Argon<Block>`) whose forward runs a torch_argon.nn.MoE built
with MoE.from_modules around those same submodules. Keeping the block's class, rather than
putting an nn.MoE in its place, is what keeps transformers' behaviour that keys on it:
`isinstance(module, Qwen3NextSparseMoeBlock)` in `_init_weights` (so a model patched before its
weights load, as from_pretrained does under a meta device, still initialises its router),
state_dict keys, save/load, repr of the submodules, pickling and deepcopy. Nothing is copied
and nothing is allocated, so a model on the meta device stays there. Keeping the model's router
module means routing is the model's own, bit for bit, and transformers' router-logits recording
(output_router_logits) still finds the router it hooks.

The activation of the gated epilogue is read from the experts' act_fn: SiLU (SwiGLU), GELU
(erf) or GELU (tanh) (transformers' "silu", "gelu", "gelu_pytorch_tanh", "gelu_new", ...).
Blocks with another activation are refused (strict) or skipped, with the reason in the report.

Gradients: the argon ops have backward formulas (torch_argon/autograd.py), so a patched block
trains on argon (on_grad="train", the default): gradients reach the router, both expert stacks,
the shared expert and the block's input, as through the block's own forward. on_grad="fallback"
runs the original block's forward instead wherever gradients are needed (grad mode on, and its
input or any of its parameters requires grad); on_grad="raise" raises an error naming the block
there. A block in training mode with router jitter (Mixtral's router_jitter_noise) runs its own
forward whatever on_grad says, since the argon path does not apply the jitter.

A lighter hook for every other transformers MoE whose experts use @use_experts_implementation
(gated SiLU / GELU, concatenated gate/up stacks, no bias): register_experts_implementation()
adds "argon" to transformers' experts implementations, then model.set_experts_implementation
("argon") (or from_pretrained(..., experts_implementation="argon")) runs the experts on the
argon ops while the model's own block does the routing and any shared expert. transformers
accepts a custom experts implementation from 5.7 on; before that the hook raises.

Versions (docs/transformers.md): patch() needs transformers 5.x (the 5.0 MoE layout: 3-D
expert stacks, routers returning (logits, weights, ids)); the experts hook needs 5.7 or later.
"""
import importlib
import warnings

import torch

from .. import activations
from ..layer import moe_experts
from ..nn import MoE, expert_weights

# transformers.models.<module>: its sparse MoE block. Those missing from the installed
# transformers are skipped.
BLOCKS = {
    "qwen3_moe": "Qwen3MoeSparseMoeBlock",
    "qwen3_next": "Qwen3NextSparseMoeBlock",
    "qwen2_moe": "Qwen2MoeSparseMoeBlock",
    "mixtral": "MixtralSparseMoeBlock",
    "olmoe": "OlmoeSparseMoeBlock",
}

# The transformers versions each entry point works with: patch() relies on the 5.0 MoE layout;
# set_experts_implementation() accepts names registered in ALL_EXPERTS_FUNCTIONS from 5.7 on
# (5.0 to 5.6 check against a fixed list of their own implementations and raise ValueError).
PATCH_VERSIONS = ((5, 0), (6, 0))  # [low, high)
EXPERTS_HOOK_MIN_VERSION = (5, 7)

_SHARDED = "_argon_experts_sharded"  # model attribute: the experts were cut to a rank's share
_MOE = "_argon_moe"  # patched block attribute (outside _modules): its torch_argon.nn.MoE
_SETTINGS = "_argon_settings"  # patched block attribute: the MoE's settings (to rebuild it)
_ON_GRAD = "_argon_on_grad"  # patched block attribute: "train", "fallback" or "raise"
ON_GRAD = ("train", "fallback", "raise")


def _require_transformers():
    try:
        return importlib.import_module("transformers")
    except ImportError as e:
        raise ImportError("torch_argon.integrations.transformers needs the transformers "
                          "package: pip install 'torch_argon[transformers]'") from e


def transformers_version():
    """The installed transformers version as (major, minor, micro); a development or
    pre-release build counts as its release (5.7.0.dev0 -> (5, 7, 0))."""
    from packaging.version import Version

    release = Version(_require_transformers().__version__).release
    return tuple(release[:3]) + (0,) * (3 - len(release[:3]))


def _format(version):
    return ".".join(map(str, version))


def check_patch_version():
    """Raise if the installed transformers is outside the range patch() supports."""
    low, high = PATCH_VERSIONS
    version = transformers_version()
    if not low <= version[:2] < high:
        raise RuntimeError(
            f"torch_argon.integrations.transformers.patch supports transformers >= {_format(low)}"
            f", < {_format(high)} (the MoE block layout of transformers 5); installed: "
            f"{_require_transformers().__version__}")


def check_experts_hook_version():
    """Raise if the installed transformers cannot take "argon" as an experts implementation."""
    version = transformers_version()
    if version[:2] < EXPERTS_HOOK_MIN_VERSION or version[:2] >= PATCH_VERSIONS[1]:
        raise RuntimeError(
            f"experts_implementation='argon' needs transformers >= "
            f"{_format(EXPERTS_HOOK_MIN_VERSION)}, < {_format(PATCH_VERSIONS[1])}: earlier "
            f"versions accept only their own implementations in set_experts_implementation(); "
            f"installed: {_require_transformers().__version__}. torch_argon.integrations."
            f"transformers.patch(model) works from {_format(PATCH_VERSIONS[0])}.")


def block_classes():
    """The supported block classes present in the installed transformers."""
    _require_transformers()
    found = []
    for module, name in BLOCKS.items():
        try:
            found.append(getattr(importlib.import_module(f"transformers.models.{module}."
                                                         f"modeling_{module}"), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


# ---- activations ---------------------------------------------------------------------------



def activation_of(act_fn):
    """argon's name ("silu", "gelu", "gelu_tanh") for a transformers act_fn module or function,
    or None when it is none of them. Decided by running act_fn on a probe made explicitly on the
    CPU in float64, never under the ambient device / dtype context: a model built under
    torch.device("meta") has no values to compare, and its act_fn holds no weights."""
    if act_fn is None:
        return None
    with torch.no_grad():
        probe = torch.linspace(-8, 8, 129, dtype=torch.float64, device="cpu")
        try:
            got = act_fn(probe)
        except Exception:  # an activation with weights of its own (on meta, or learned)
            return None
        if not isinstance(got, torch.Tensor) or got.device.type != "cpu":
            return None
        # GELU (tanh) differs from GELU (erf) by up to ~1e-3 on the probe, far above the
        # tolerance, so the two are told apart.
        for name, reference in activations.REFERENCE.items():
            if torch.allclose(got, reference(probe), rtol=1e-9, atol=1e-9):
                return name
    return None


def why_experts_unsupported(experts):
    """Why an experts module cannot run on the argon ops, or ''."""
    if not all(hasattr(experts, a) for a in ("gate_up_proj", "down_proj")):
        return "its experts hold no gate_up_proj / down_proj stacks"
    if getattr(experts, "has_bias", False):
        return "its experts have biases"
    if not getattr(experts, "is_concatenated", True):
        return "its gate/up rows are interleaved, not concatenated"
    if not getattr(experts, "has_gate", True):
        return "its experts are not gated (no gate rows in gate_up_proj)"
    if getattr(experts, "has_post_expert_norm", False):
        return "its experts apply a norm after each expert"
    if activation_of(getattr(experts, "act_fn", None)) is None:
        return (f"its experts' activation ({_act_name(experts)}) is none of SiLU, GELU (erf), "
                f"GELU (tanh)")
    return ""


def _act_name(module):
    act = getattr(module, "act_fn", None)
    return type(act).__name__ if isinstance(act, torch.nn.Module) else repr(act)


def why_unsupported(block):
    """Why a block of a supported class cannot be swapped (an unusual config), or ''."""
    reason = why_experts_unsupported(block.experts)
    if reason:
        return reason
    shared = getattr(block, "shared_expert", None)
    if shared is not None:
        act = activation_of(getattr(shared, "act_fn", None))
        if act is None:
            return (f"its shared expert's activation ({_act_name(shared)}) is none of SiLU, "
                    f"GELU (erf), GELU (tanh)")
        if act != activation_of(block.experts.act_fn):
            return (f"its shared expert's activation ({act}) differs from its experts' "
                    f"({activation_of(block.experts.act_fn)})")
    return ""


def to_argon(block, *, tile_m=None, ops=None, process_group=None, ep_mode="auto",
             ep_tokens="sharded"):
    """A torch_argon.nn.MoE sharing the modules of one transformers sparse MoE block. With a
    process_group, the block's experts module is first cut down in place to this rank's experts
    (torch_argon.distributed.keep_local_experts_) and the MoE runs expert parallel."""
    reason = why_unsupported(block)
    if reason:
        raise ValueError(f"cannot swap {type(block).__name__}: {reason}")
    n_experts = None
    if process_group is not None:
        from ..distributed import keep_local_experts_
        n_experts = block.gate.weight.shape[0]
        keep_local_experts_(block.experts, n_experts, process_group)
    return MoE.from_modules(block.gate, block.experts, getattr(block, "shared_expert", None),
                            getattr(block, "shared_expert_gate", None), tile_m=tile_m, ops=ops,
                            activation=activation_of(block.experts.act_fn),
                            process_group=process_group, ep_mode=ep_mode, ep_tokens=ep_tokens,
                            n_experts=n_experts)


# ---- the patched block classes -------------------------------------------------------------

class ArgonBlock:
    """Mixin of the patched block classes (Argon<Block>(ArgonBlock, <Block>)): forward runs the
    block's torch_argon.nn.MoE, or the block's own forward where on_grad="fallback" says so or
    router jitter is on."""

    def forward(self, hidden_states, *args, **kwargs):
        reason = _why_original_forward(self, hidden_states)
        if reason:
            if self.__dict__.get(_ON_GRAD, "fallback") == "raise":
                raise RuntimeError(
                    f"{type(self).__bases__[1].__name__} patched by torch_argon with "
                    f"on_grad='raise': {reason}; patch with on_grad='train' (the default: the "
                    f"block trains on argon) or on_grad='fallback' (its own forward runs "
                    f"then), or run it under torch.no_grad() / torch.inference_mode()")
            return super().forward(hidden_states, *args, **kwargs)
        return argon_forward(self, hidden_states, *args, **kwargs)

    def __getstate__(self):
        # deepcopy and pickle leave the MoE out (it holds the ops namespace, which does not
        # pickle; and a copy must wrap its own submodules): the first forward rebuilds it.
        state = super().__getstate__()
        state.pop(_MOE, None)
        return state


def argon_forward(block, hidden_states, *args, **kwargs):
    """A patched block's forward on argon: its nn.MoE, (re)built from the block's current
    submodules when it has none yet (a deepcopy, an unpickled model) or when they were replaced
    since (module surgery, a loader that swaps modules)."""
    moe = block.__dict__.get(_MOE)
    if (moe is None or moe.gate is not block.gate or moe.experts is not block.experts
            or moe.shared_expert is not getattr(block, "shared_expert", None)
            or moe.shared_expert_gate is not getattr(block, "shared_expert_gate", None)):
        moe = block.__dict__[_MOE] = _build_moe(block, **block.__dict__[_SETTINGS])
    return moe(hidden_states)


def _build_moe(block, *, activation, tile_m=None, ops=None, process_group=None, ep_mode="auto",
               ep_tokens="sharded", n_experts=None):
    return MoE.from_modules(block.gate, block.experts, getattr(block, "shared_expert", None),
                            getattr(block, "shared_expert_gate", None), tile_m=tile_m, ops=ops,
                            activation=activation, process_group=process_group,
                            ep_mode=ep_mode, ep_tokens=ep_tokens, n_experts=n_experts)


def _why_original_forward(block, hidden_states):
    """Why a patched block must run its own forward this call, or ''."""
    if block.__dict__.get(_ON_GRAD, "train") != "train" and torch.is_grad_enabled():
        if isinstance(hidden_states, torch.Tensor) and hidden_states.requires_grad:
            return "its input requires grad"
        if any(p.requires_grad for p in block.parameters()):
            return "its parameters require grad (grad mode is on)"
    if block.training and getattr(block, "jitter_noise", 0):
        return "it is in training mode with router jitter"
    return ""


_PATCHED_CLASSES = {}  # block class -> its Argon subclass


def patched_class(cls):
    """The Argon subclass of a block class (made once; a global of this module by its name, so
    pickle finds it)."""
    if cls not in _PATCHED_CLASSES:
        name = f"Argon{cls.__name__}"
        doc = f"{cls.__name__} on the argon ops (torch_argon.integrations.transformers)."
        sub = type(name, (ArgonBlock, cls), {"__module__": __name__, "__qualname__": name,
                                             "__doc__": doc})
        _PATCHED_CLASSES[cls] = sub
        globals()[name] = sub
    return _PATCHED_CLASSES[cls]


class PatchReport(list):
    """What patch() did: the list of the qualified names of the blocks patched (so it compares
    equal to that list), with `.skipped`: {name: why} for the supported blocks left as they were
    (strict=False), `.activations`: {name: "silu" | "gelu" | "gelu_tanh"}, and `.nothing_to_patch`:
    why the model offered no block to patch ("" when it did)."""

    def __init__(self, patched=(), skipped=None, activations=None, nothing_to_patch=""):
        super().__init__(patched)
        self.skipped = dict(skipped or {})
        self.activations = dict(activations or {})
        self.nothing_to_patch = nothing_to_patch

    @property
    def patched(self):
        return list(self)

    def summary(self):
        text = f"torch_argon patched {len(self)} MoE block(s)"
        if self.nothing_to_patch:
            text += f": {self.nothing_to_patch}"
        if self.skipped:
            text += f", skipped {len(self.skipped)}: " + "; ".join(
                f"{n}: {why}" for n, why in self.skipped.items())
        return text

    def __repr__(self):
        why = f", nothing_to_patch={self.nothing_to_patch!r}" if self.nothing_to_patch else ""
        return f"PatchReport(patched={list(self)!r}, skipped={self.skipped!r}{why})"


def _nothing_to_patch(model, classes, already):
    """Why a model offered patch() no block: every MoE block patched already, or none of a
    supported class."""
    if already:
        return (f"its {len(already)} MoE block(s) are patched already "
                f"({', '.join(already[:3])}{', ...' if len(already) > 3 else ''})")
    return (f"{type(model).__name__} has no sparse MoE block of a supported class "
            f"({', '.join(c.__name__ for c in classes) or 'none in this transformers'})")


def patch(model, *, tile_m=None, ops=None, strict=True, on_grad="train", process_group=None,
          ep_mode="auto", ep_tokens="sharded"):
    """Run every supported sparse MoE block of `model` on the argon ops (its class becomes
    Argon<Block>; see the module doc). Returns a PatchReport: the list of the qualified names of
    the blocks patched, with .skipped {name: why not}.

    Works on a model on any device, the meta device included (from_pretrained's empty init, or
    built under torch.device("meta")): nothing is allocated or moved.
    strict: raise when a supported block cannot be swapped (unusual config); with
        strict=False such blocks are left as they are, and a warning names them and why.
        A model with no block to patch (none of a supported class, or all patched already)
        gives an empty report that says why (.nothing_to_patch), with a warning.
    on_grad: what a patched block does when its forward needs gradients (see the module doc):
        "train" runs it on argon with its backward (the default), "fallback" runs the block's
        own forward, "raise" raises.
    process_group: run the experts expert parallel over this torch.distributed group (every
        rank runs the model; docs/distributed.md). Each block's experts are cut down in place
        to this rank's share, so patch after loading the weights; the state_dict then holds
        this rank's experts, and unpatch is refused. ep_mode, ep_tokens: see nn.MoE
        ("replicated" when every rank runs the same inputs: cheaper than the default).
    """
    check_patch_version()
    if on_grad not in ON_GRAD:
        raise ValueError(f"patch: on_grad must be one of {ON_GRAD}, got {on_grad!r}")
    classes = block_classes()
    report = PatchReport()
    already = []
    for name, module in list(model.named_modules()):
        if isinstance(module, ArgonBlock):
            already.append(name)
        if not isinstance(module, classes) or isinstance(module, ArgonBlock):
            continue
        reason = why_unsupported(module)
        if reason:
            if strict:
                raise ValueError(f"cannot swap {name} ({type(module).__name__}): {reason}")
            report.skipped[name] = reason
            continue
        moe = to_argon(module, tile_m=tile_m, ops=ops, process_group=process_group,
                       ep_mode=ep_mode, ep_tokens=ep_tokens)
        # Outside _modules: the MoE shares the block's submodules, and must not add state_dict
        # keys, children or parameters of its own.
        module.__dict__[_MOE] = moe
        module.__dict__[_SETTINGS] = dict(
            activation=moe.activation, tile_m=tile_m, ops=ops, process_group=process_group,
            ep_mode=ep_mode, ep_tokens=ep_tokens, n_experts=moe.n_experts)
        module.__dict__[_ON_GRAD] = on_grad
        module.__class__ = patched_class(type(module))
        if process_group is not None:
            model.__dict__[_SHARDED] = True
        report.append(name)
        report.activations[name] = moe.activation
    if not report and not report.skipped:
        report.nothing_to_patch = _nothing_to_patch(model, classes, already)
    if report.skipped or report.nothing_to_patch:
        warnings.warn(report.summary(), stacklevel=2)
    return report


def unpatch(model):
    """Give the patched blocks their own classes back. Returns the qualified names restored."""
    if model.__dict__.get(_SHARDED):
        raise ValueError("unpatch: this model's experts were cut down to one rank's share by "
                         "patch(process_group=...); the original blocks cannot run them (reload "
                         "the model)")
    restored = []
    for name, module in model.named_modules():
        if isinstance(module, ArgonBlock):
            module.__class__ = type(module).__bases__[1]
            for attribute in (_MOE, _SETTINGS, _ON_GRAD):
                module.__dict__.pop(attribute, None)
            restored.append(name)
    return restored


def is_patched(model):
    return any(isinstance(m, ArgonBlock) for m in model.modules())


def patched_blocks(model):
    """The qualified names of the patched blocks of `model`."""
    return [n for n, m in model.named_modules() if isinstance(m, ArgonBlock)]


# ---- the experts-implementation hook -------------------------------------------------------

EXPERTS_IMPLEMENTATION = "argon"


def argon_experts_forward(experts, hidden_states, top_k_index, top_k_weights):
    """transformers' experts forward signature: x [T, H], ids [T, K], weights [T, K] -> [T, H].
    Expert-parallel sentinel ids (== num_experts) become -1, which the plan skips. In grad mode
    the argon ops' backward formulas give the experts, hidden_states and top_k_weights their
    gradients."""
    activation = experts.__dict__.get("_argon_activation")
    if activation is None:
        reason = why_experts_unsupported(experts)
        if reason:
            raise ValueError(f"experts_implementation='argon' cannot run "
                             f"{type(experts).__name__}: {reason}")
        activation = experts.__dict__["_argon_activation"] = activation_of(experts.act_fn)
    weights = expert_weights(experts)
    if getattr(experts, "_is_expert_parallel", False):
        top_k_index = torch.where(top_k_index >= weights.n_experts, -1, top_k_index)
    return moe_experts(hidden_states, top_k_index, top_k_weights, weights,
                       activation=activation)


def register_experts_implementation():
    """Adds "argon" to transformers' experts implementations (idempotent). Raises on a
    transformers that cannot use it (before 5.7)."""
    _require_transformers()
    check_experts_hook_version()
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(EXPERTS_IMPLEMENTATION, argon_experts_forward)
    return EXPERTS_IMPLEMENTATION
