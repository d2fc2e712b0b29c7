"""A transformers model from a GGUF MoE file, its experts kept in their GGUF blocks.

    from torch_argon.integrations.gguf_transformers import from_gguf
    model = from_gguf("Qwen3-30B-A3B-Q4_K_M.gguf", device="cuda", dtype=torch.bfloat16)
    model.generate(input_ids, max_new_tokens=32)

What is built: the transformers model of the file's architecture (qwen3moe -> Qwen3MoeForCausalLM,
qwen2moe -> Qwen2MoeForCausalLM, llama with experts -> MixtralForCausalLM, olmoe ->
OlmoeForCausalLM), its config read from the GGUF metadata, instantiated on the meta device. Its
attention, norms, embeddings, output head, routers and shared experts are the model's own
modules, filled with the file's tensors dequantized (gguf.quants.dequantize) to `dtype`. Each
sparse MoE block is a torch_argon.nn.MoE around the block's own router (so routing is the
model's, bit for bit) and an nn.QuantExperts holding the bytes of `blk.N.ffn_*_exps` as the file
stores them; the full-precision expert stacks never exist, on the host or the device.

transformers' own GGUF loader (from_pretrained(..., gguf_file=...)) dequantizes every tensor of
these architectures to full precision (it keeps blocks packed only for qwen35 / qwen35moe / lfm2,
and only where a published hub kernel loads); for those, see argon_gguf_experts below.

Qwen3-Next is read by torch_argon.gguf (its MoE blocks as argon layers) but not built here:
transformers has no GGUF mapping for its linear-attention (ssm_*) tensors.
"""
import re

import numpy as np
import torch

from ..gguf import GGUFError, GGUFMoE
from ..nn import ExpertWeightsModule, MoE, experts_module

# GGUF arch -> transformers model_type
MODEL_TYPES = {"qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe", "llama": "mixtral",
               "olmoe": "olmoe"}

# GGUF tensor name (blk.N. stripped) -> transformers parameter name (model.layers.N. stripped).
# Expert stacks (ffn_*_exps) are not here: they go to QuantExperts as bytes.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_EXPERTS = re.compile(r"blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.weight")


def _require_transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("torch_argon.integrations.gguf_transformers needs the transformers "
                          "package: pip install 'torch_argon[transformers]'") from e
    return transformers


def hf_name(gguf_name):
    """The transformers parameter name of a non-expert GGUF tensor, or None (expert stacks and
    tensors these models do not have)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_TENSOR.fullmatch(gguf_name)
    if m is None or m[2] not in _BLOCK_NAMES:
        return None
    return f"model.layers.{m[1]}.{_BLOCK_NAMES[m[2]]}.{m[3]}"


def gguf_name(param):
    """The GGUF tensor name a transformers parameter is read from (the inverse of hf_name)."""
    for g, h in _GLOBAL_NAMES.items():
        if h == param:
            return g
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)", param)
    if m:
        for g, h in _BLOCK_NAMES.items():
            if h == m[2]:
                return f"blk.{m[1]}.{g}.{m[3]}"
    return param


def gguf_config(f: GGUFMoE):
    """The transformers config of GGUF file `f` (a GGUFMoE), from its metadata."""
    transformers = _require_transformers()
    c = f.config
    if c.arch not in MODEL_TYPES:
        raise GGUFError(f"{f.path}: architecture {c.arch!r} has no transformers model built "
                        f"here (supported: {', '.join(MODEL_TYPES)})")
    if c.moe_blocks != tuple(range(c.n_blocks)):
        raise GGUFError(f"{f.path}: blocks {sorted(set(range(c.n_blocks)) - set(c.moe_blocks))} "
                        f"have no expert tensors; from_gguf builds models whose every block is MoE")
    a = c.arch

    def req(key):
        return f._require(f"{a}.{key}")

    n_head = int(req("attention.head_count"))
    tokens = f._field("tokenizer.ggml.tokens")
    vocab = f._field(f"{a}.vocab_size") or (len(tokens) if tokens else None)
    if vocab is None:
        vocab = f._tensor("token_embd.weight").shape[-1]
    kw = dict(
        num_hidden_layers=c.n_blocks, hidden_size=c.hidden, vocab_size=int(vocab),
        num_attention_heads=n_head,
        num_key_value_heads=int(f._field(f"{a}.attention.head_count_kv", n_head)),
        head_dim=int(f._field(f"{a}.attention.key_length", c.hidden // n_head)),
        max_position_embeddings=int(f._field(f"{a}.context_length", 4096)),
        rms_norm_eps=float(f._field(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(f._field(f"{a}.rope.freq_base", 10000.0)),
        num_experts_per_tok=c.top_k,
        tie_word_embeddings="output.weight" not in f.tensors,
    )
    for key, name in (("bos_token_id", "tokenizer.ggml.bos_token_id"),
                      ("eos_token_id", "tokenizer.ggml.eos_token_id"),
                      ("pad_token_id", "tokenizer.ggml.padding_token_id")):
        value = f._field(name)
        if value is not None:
            kw[key] = int(value)
    model_type = MODEL_TYPES[a]
    if model_type == "mixtral":  # the expert width is Mixtral's intermediate_size
        kw.update(num_local_experts=c.n_experts, intermediate_size=c.inter)
    else:
        kw.update(num_experts=c.n_experts, intermediate_size=c.inter,
                  moe_intermediate_size=c.inter, norm_topk_prob=c.renormalize)
    if model_type in ("qwen3_moe", "qwen2_moe"):
        kw.update(decoder_sparse_step=1, mlp_only_layers=[])
    if model_type == "qwen2_moe":
        kw.update(shared_expert_intermediate_size=c.shared_inter or 0, qkv_bias=True)
    config = transformers.AutoConfig.for_model(model_type, **kw)
    if c.scoring != "softmax":
        raise GGUFError(f"{f.path}: {a}.expert_gating_func is {c.scoring}; the transformers "
                        f"{model_type} router computes softmax")
    return config


def _dense(f, name, t, shape, dtype, device, llama_heads):
    """GGUF tensor `t` dequantized (gguf.quants.dequantize: every ggml type) as `shape`; its
    bytes read from the file, not through the memory map (see GGUFMoE._read_bytes)."""
    import gguf
    n_rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1  # t.shape is ggml's, reversed
    raw = f._read_bytes(name, t).numpy().reshape(n_rows, -1)
    values = gguf.quants.dequantize(raw, t.tensor_type)
    if llama_heads is not None:  # undo llama.cpp's rotary row permutation of q / k
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
        values = LlamaTensorProcessor(config=llama_heads).process(values, name).weights
    if values.size != int(np.prod(shape)):
        raise GGUFError(f"{f.path}: tensor {name!r} has shape {list(values.shape)}, expected "
                        f"{list(shape)} from the file's metadata")
    values = np.ascontiguousarray(values).reshape(shape)
    return torch.from_numpy(values).to(device=device, dtype=dtype)


def _rebuild_rotary(model, device):
    """Rotary embeddings keep non-persistent inv_freq buffers computed at construction: build
    them again on `device` (the meta-device copies hold no values)."""
    for name, module in list(model.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):
            with torch.device(device):
                fresh = type(module)(config=model.config)
            model.set_submodule(name, fresh)


def _device_to_load_onto(device):
    """from_gguf's `device` as a torch.device that can hold the file's weights, or a ValueError
    that names the argument: checked before the file is read."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"from_gguf: device={device!r} is not a torch device ({e})") from None
    if dev.type == "meta":
        raise ValueError("from_gguf: device='meta' holds no data, but from_gguf loads the file's "
                         "weights; for a model without weights, build it on the meta device "
                         "with transformers and patch it (torch_argon.integrations.transformers)")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"from_gguf: device={device!r}: torch_argon runs on cpu, cuda and mps")
    if dev.type == "cuda" and not torch.cuda.is_available():
        built = "" if torch.version.cuda else " (this torch is built without CUDA)"
        raise ValueError(f"from_gguf: device={device!r}: torch sees no CUDA device{built}")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"from_gguf: device={device!r}: torch sees "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"from_gguf: device={device!r}: torch sees no MPS device")
    return dev


def from_gguf(path, *, device="cpu", dtype=torch.float32, tile_m=None, activation_quant="auto"):
    """The transformers causal-LM of GGUF MoE file `path` on `device`, its non-expert weights in
    `dtype` and its sparse MoE blocks torch_argon.nn.MoE layers on the file's packed experts
    (experts stored as plain floats: dense stacks in `dtype`). activation_quant: the layers'
    option (nn.MoE).

    Raises ValueError naming `device` for a device that cannot hold the weights (meta, one torch
    does not see), and GGUFError naming the file and the tensor or key for files that cannot be
    built (truncated, missing tensors, formats torch_argon does not run, shapes that disagree
    with the metadata)."""
    device = _device_to_load_onto(device)
    transformers = _require_transformers()
    f = GGUFMoE(path)
    config = gguf_config(f)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    from .transformers import block_classes
    classes = block_classes()
    # The sparse blocks become argon layers first, so the dense expert stacks of the meta model
    # are dropped before anything is materialised.
    expert_params = set()  # the experts' own parameters (float experts): loaded already
    for name, module in list(model.named_modules()):
        if isinstance(module, classes):
            block = int(name.split(".")[2])
            experts = experts_module(f.experts(block, device, dtype))
            expert_params.update(f"{name}.experts.{p}" for p, _ in experts.named_parameters())
            model.set_submodule(name, MoE.from_modules(
                module.gate, experts, getattr(module, "shared_expert", None),
                getattr(module, "shared_expert_gate", None), tile_m=tile_m,
                activation_quant=activation_quant))
    params = dict(model.named_parameters())
    llama_heads = ({"num_attention_heads": config.num_attention_heads,
                    "num_key_value_heads": config.num_key_value_heads}
                   if f.config.arch == "llama" else None)
    loaded = {}
    for name, t in f.tensors.items():
        if _EXPERTS.fullmatch(name):
            continue
        target = hf_name(name)
        if target is None or target not in params:
            continue  # a tensor this model has no parameter for (e.g. rope_freqs)
        heads = llama_heads if re.search(r"\.attn_[qk]\.weight$", name) else None
        loaded[target] = torch.nn.Parameter(
            _dense(f, name, t, params[target].shape, dtype, device, heads), requires_grad=False)
    if config.tie_word_embeddings:
        loaded.pop("lm_head.weight", None)
    missing = [n for n in params if n not in loaded and n not in expert_params
               and not (config.tie_word_embeddings and n == "lm_head.weight")]
    if missing:
        raise GGUFError(f"{f.path}: missing tensor {gguf_name(missing[0])!r} (the model's "
                        f"{missing[0]})" +
                        (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    for target, p in loaded.items():
        parent, _, leaf = target.rpartition(".")
        setattr(model.get_submodule(parent), leaf, p)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    _rebuild_rotary(model, device)
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if t.device.type == "meta"]
    if meta:
        raise GGUFError(f"{f.path}: {meta[0]!r} was left unloaded")
    model.gguf = f  # the open file: its config and expert_bytes, for inspection
    return model


# ---- (a) the architectures transformers keeps packed: its GgufExperts on argon ---------------

class ArgonGgufExperts(ExpertWeightsModule):
    """Drop-in for transformers' GgufExperts (transformers.integrations.gguf.utils): the same
    uint8 parameters `gate_up_proj` [E, 2I, row bytes] and `down_proj` [E, H, row bytes] (shared,
    not copied) and the same forward(hidden_states, top_k_index, top_k_weights), run on
    torch_argon's quantized experts (moe_qmm with the SwiGLU between) instead of the hub
    kernel's mul_mat_id."""

    WEIGHT_ATTRIBUTES = ("gate_up_proj", "down_proj")

    def __init__(self, gguf_experts):
        super().__init__()
        from .transformers import activation_of
        self.activation = activation_of(gguf_experts.act_fn)
        if self.activation is None:
            raise ValueError("ArgonGgufExperts: the experts' activation is none of SiLU, GELU "
                             "(erf) and GELU (tanh)")
        self.num_experts = gguf_experts.num_experts
        self.hidden_dim = gguf_experts.hidden_dim
        self.intermediate_dim = gguf_experts.intermediate_dim
        self.gate_up_type = gguf_experts.gate_up_type
        self.down_type = gguf_experts.down_type
        self.act_fn = gguf_experts.act_fn
        self.gate_up_proj = gguf_experts.gate_up_proj
        self.down_proj = gguf_experts.down_proj
        self.expert_weights()  # refuse formats argon does not run, here rather than mid-forward

    def build_expert_weights(self):
        from ..quant import QuantizedExperts, QuantizedWeight
        # activation_quant="none": transformers multiplies these experts at the activations'
        # precision, and a patched model computes what the model computes (from_gguf, our own
        # loader, takes the layer's "auto")
        return QuantizedExperts(
            gate_up=QuantizedWeight(self.gate_up_proj, self.gate_up_type, self.hidden_dim),
            down=QuantizedWeight(self.down_proj, self.down_type, self.intermediate_dim),
            activation_quant="none")

    def forward(self, hidden_states, top_k_index, top_k_weights):
        from ..layer import moe_experts
        return moe_experts(hidden_states, top_k_index, top_k_weights, self.expert_weights(),
                           activation=self.activation)

    def extra_repr(self):
        return (f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, "
                f"intermediate_dim={self.intermediate_dim}, "
                f"ggml_types=({self.gate_up_type}, {self.down_type})")


def argon_gguf_experts(model, *, strict=True):
    """Replace every transformers GgufExperts of `model` (a GGUF model transformers loaded with
    its experts packed: qwen35moe, when its hub kernel is available) by an ArgonGgufExperts on
    the same bytes. Returns the qualified names replaced. strict: raise on experts argon cannot
    run (a format it does not read); with strict=False they are left as they are."""
    _require_transformers()
    from transformers.integrations.gguf.utils import GgufExperts
    replaced = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, GgufExperts):
            continue
        try:
            model.set_submodule(name, ArgonGgufExperts(module))
        except ValueError:
            if strict:
                raise
            continue
        replaced.append(name)
    return replaced
