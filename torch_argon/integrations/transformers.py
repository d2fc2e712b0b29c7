"""Swap the sparse MoE blocks of a transformers model for torch_argon.nn.MoE, and back.

    from torch_argon.integrations import transformers as argon_hf
    names = argon_hf.patch(model)     # the qualified names of the blocks replaced
    model.generate(...)
    argon_hf.unpatch(model)

What a patched block is: a torch_argon.nn.MoE built with MoE.from_modules around the block's
own `gate` (router), `experts` (gate_up_proj / down_proj stacks), and `shared_expert` /
`shared_expert_gate` where the block has them. Nothing is copied and the parameter names do
not change, so the state_dict, save_pretrained and loading all behave as before. Keeping the
model's router module means routing is the model's own, bit for bit, and transformers'
router-logits recording (output_router_logits) still finds the router it hooks.

The patched block returns what the block it replaces returns (a [B, S, H] tensor in
transformers 5). Inference only: the argon ops have no autograd formulas, and Mixtral's
training-time router jitter is not applied.

A lighter hook for every other transformers MoE whose experts use @use_experts_implementation
(SwiGLU, concatenated gate/up stacks, no bias): register_experts_implementation() adds "argon"
to transformers' experts implementations, then model.set_experts_implementation("argon") (or
from_pretrained(..., experts_implementation="argon")) runs the experts on the argon ops while
the model's own block does the routing and any shared expert.
"""
import importlib

import torch
import torch.nn.functional as F

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

_ORIGINALS = "_argon_original_blocks"  # model attribute: {qualified name: original block}
_SHARDED = "_argon_experts_sharded"  # model attribute: the experts were cut to a rank's share


def _require_transformers():
    try:
        return importlib.import_module("transformers")
    except ImportError as e:
        raise ImportError("torch_argon.integrations.transformers needs the transformers "
                          "package: pip install 'torch_argon[transformers]'") from e


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


def _is_silu(act_fn):
    probe = torch.linspace(-8, 8, 65)
    return torch.allclose(act_fn(probe), F.silu(probe))


def why_experts_unsupported(experts):
    """Why an experts module cannot run on the argon ops, or ''."""
    if not all(hasattr(experts, a) for a in ("gate_up_proj", "down_proj")):
        return "its experts hold no gate_up_proj / down_proj stacks"
    if getattr(experts, "has_bias", False):
        return "its experts have biases"
    if not getattr(experts, "is_concatenated", True):
        return "its gate/up rows are interleaved, not concatenated"
    if not _is_silu(experts.act_fn):
        return "its experts' activation is not SiLU (SwiGLU)"
    return ""


def why_unsupported(block):
    """Why a block of a supported class cannot be swapped (an unusual config), or ''."""
    reason = why_experts_unsupported(block.experts)
    if reason:
        return reason
    shared = getattr(block, "shared_expert", None)
    if shared is not None and not _is_silu(shared.act_fn):
        return "its shared expert's activation is not SiLU"
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
                            process_group=process_group, ep_mode=ep_mode, ep_tokens=ep_tokens,
                            n_experts=n_experts)


def _set_submodule(model, name, module):
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def patch(model, *, tile_m=None, ops=None, strict=True, process_group=None, ep_mode="auto",
          ep_tokens="sharded"):
    """Replace every supported sparse MoE block of `model` by a torch_argon.nn.MoE sharing its
    parameters. Returns the qualified names of the replaced blocks.

    strict: raise when a supported block cannot be swapped (unusual config); with
    strict=False such blocks are left as they are.
    process_group: run the experts expert parallel over this torch.distributed group (every
        rank runs the model; docs/distributed.md). Each block's experts are cut down in place
        to this rank's share, so patch after loading the weights; the state_dict then holds
        this rank's experts, and unpatch is refused. ep_mode, ep_tokens: see nn.MoE
        ("replicated" when every rank runs the same inputs: cheaper than the default).
    """
    classes = block_classes()
    originals = model.__dict__.setdefault(_ORIGINALS, {})
    patched = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, classes) or name in originals:
            continue
        reason = why_unsupported(module)
        if reason:
            if strict:
                raise ValueError(f"cannot swap {name} ({type(module).__name__}): {reason}")
            continue
        _set_submodule(model, name, to_argon(module, tile_m=tile_m, ops=ops,
                                             process_group=process_group, ep_mode=ep_mode,
                                             ep_tokens=ep_tokens))
        if process_group is not None:
            model.__dict__[_SHARDED] = True
        originals[name] = module
        patched.append(name)
    return patched


def unpatch(model):
    """Put the original blocks back. Returns the qualified names restored."""
    if model.__dict__.get(_SHARDED):
        raise ValueError("unpatch: this model's experts were cut down to one rank's share by "
                         "patch(process_group=...); the original blocks cannot run them (reload "
                         "the model)")
    originals = model.__dict__.pop(_ORIGINALS, {})
    for name, module in originals.items():
        _set_submodule(model, name, module)
    return list(originals)


def is_patched(model):
    return bool(model.__dict__.get(_ORIGINALS))


# ---- the experts-implementation hook -------------------------------------------------------

EXPERTS_IMPLEMENTATION = "argon"


def argon_experts_forward(experts, hidden_states, top_k_index, top_k_weights):
    """transformers' experts forward signature: x [T, H], ids [T, K], weights [T, K] -> [T, H].
    Expert-parallel sentinel ids (== num_experts) become -1, which the plan skips."""
    if not getattr(experts, "_argon_checked", False):
        reason = why_experts_unsupported(experts)
        if reason:
            raise ValueError(f"experts_implementation='argon' cannot run "
                             f"{type(experts).__name__}: {reason}")
        experts._argon_checked = True
    weights = expert_weights(experts)
    if getattr(experts, "_is_expert_parallel", False):
        top_k_index = torch.where(top_k_index >= weights.n_experts, -1, top_k_index)
    return moe_experts(hidden_states, top_k_index, top_k_weights, weights)


def register_experts_implementation():
    """Adds "argon" to transformers' experts implementations (idempotent)."""
    _require_transformers()
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(EXPERTS_IMPLEMENTATION, argon_experts_forward)
    return EXPERTS_IMPLEMENTATION
