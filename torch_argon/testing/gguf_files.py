"""GGUF MoE files written with the gguf package's writer, for the tests and the benchmarks:
tiny files of MoE blocks (the metadata of an architecture, random quantized expert tensors with
finite scales, a float router and, where the architecture has one, a shared expert stored
quantized), whole decoder models around them, and transformers' own GGUF loader as the oracle
and the baseline. The gguf package (and transformers, for the loaders) is imported on use."""
import numpy as np
import torch

from ..quant import random_quantized

ARCH_KEYS = {"qwen3moe": "qwen3moe", "qwen2moe": "qwen2moe", "mixtral": "llama",
             "olmoe": "olmoe"}


def _blocks(fmt, E, n, k, g):
    """Random blocks of a format: finite-scale synthetic weights for the formats torch_argon
    reads, raw random bytes of the right size for others (files it must refuse)."""
    import gguf
    from ..quant import FORMATS
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


# ---- whole models: attention, norms, embeddings and a tokenizer around the MoE blocks --------

# family: GGUF arch, and whether llama.cpp stores attn_q / attn_k with its rotary row permutation
# (LlamaModel.permute in convert_hf_to_gguf.py: Mixtral yes; Qwen and OLMoE use NEOX rotary, no).
MODEL_FAMILIES = {"qwen3moe": ("qwen3moe", False), "qwen2moe": ("qwen2moe", False),
                  "mixtral": ("llama", True), "olmoe": ("olmoe", False)}


def llama_cpp_permute(w, n_head):
    """Rows of a q/k projection as llama.cpp's converter writes them for llama: per head, the
    interleaved rotary pairs laid out as two halves."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_model_file(path, family="qwen3moe", *, n_blocks=2, E=8, K=2, H=256, I=768, vocab=96,
                     n_head=4, n_kv_head=2, head_dim=64, shared_inter=None,
                     expert_formats=("Q4_K", "Q4_K", "Q6_K"), attn_format="Q8_0",
                     tied=False, seed=0, skip=(), expert_ffn_metadata=None):
    """A whole decoder MoE model in GGUF as llama.cpp lays it out, with random weights: token
    embedding, per block attention (Q8_0 by default) with its norms, router and quantized
    experts (expert_formats: gate, up, down), final norm, output head (unless tied), a small
    gpt2-style tokenizer. expert_ffn_metadata: a wrong expert width to write in the metadata
    (bad-file tests). Returns {"experts": {name: uint8 blocks}, "q": {block: float q weight
    before llama.cpp's permutation}} (what the loader must give back)."""
    import gguf
    arch, permuted = MODEL_FAMILIES[family]
    g = torch.Generator().manual_seed(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{family}")
    w.add_block_count(n_blocks)
    w.add_context_length(512)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_expert_feed_forward_length(expert_ffn_metadata or I)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv_head)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_vocab_size(vocab)
    if shared_inter:
        w.add_expert_shared_feed_forward_length(shared_inter)
    # A byte-level BPE vocabulary of `vocab` single characters: enough for transformers' GGUF
    # tokenizer reader and for generate()'s eos/bos ids.
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(0x21 + i) for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges([])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    out = {"experts": {}, "q": {}}

    def add(name, t, fmt="F32"):
        if name in skip:
            return
        if fmt in ("F32", "F16"):
            arr = t.numpy().astype(np.float32 if fmt == "F32" else np.float16)
            w.add_tensor(name, arr)
        else:
            qtype = gguf.GGMLQuantizationType[fmt]
            w.add_tensor(name, gguf.quants.quantize(t.numpy().astype(np.float32), qtype),
                         raw_dtype=qtype)

    def randn(*shape, std=None):
        return torch.randn(*shape, generator=g) * (shape[-1] ** -0.5 if std is None else std)

    def norm(n):
        return 1 + 0.1 * torch.randn(n, generator=g)

    add("token_embd.weight", randn(vocab, H, std=1.0), "F16")
    add("output_norm.weight", norm(H))
    if not tied:
        add("output.weight", randn(vocab, H), attn_format)
    for b in range(n_blocks):
        p = f"blk.{b}."
        q, k = randn(n_head * head_dim, H), randn(n_kv_head * head_dim, H)
        out["q"][b] = q
        if permuted:
            q, k = llama_cpp_permute(q, n_head), llama_cpp_permute(k, n_kv_head)
        add(p + "attn_norm.weight", norm(H))
        add(p + "attn_q.weight", q, attn_format)
        add(p + "attn_k.weight", k, attn_format)
        add(p + "attn_v.weight", randn(n_kv_head * head_dim, H), attn_format)
        add(p + "attn_output.weight", randn(H, n_head * head_dim), attn_format)
        if family == "qwen3moe":
            add(p + "attn_q_norm.weight", norm(head_dim))
            add(p + "attn_k_norm.weight", norm(head_dim))
        if family == "olmoe":  # OLMoE normalises the whole q / k projection
            add(p + "attn_q_norm.weight", norm(n_head * head_dim))
            add(p + "attn_k_norm.weight", norm(n_kv_head * head_dim))
        if family == "qwen2moe":
            for part, n in (("q", n_head), ("k", n_kv_head), ("v", n_kv_head)):
                add(p + f"attn_{part}.bias", 0.1 * torch.randn(n * head_dim, generator=g))
        add(p + "ffn_norm.weight", norm(H))
        add(p + "ffn_gate_inp.weight", randn(E, H))
        gate_fmt, up_fmt, down_fmt = expert_formats
        for part, fmt, n, k_in in (("gate", gate_fmt, I, H), ("up", up_fmt, I, H),
                                   ("down", down_fmt, H, I)):
            name = p + f"ffn_{part}_exps.weight"
            blocks = _blocks(fmt, E, n, k_in, g)
            if name not in skip:
                w.add_tensor(name, blocks.numpy(), raw_dtype=gguf.GGMLQuantizationType[fmt])
            out["experts"][name] = blocks
        if shared_inter:
            add(p + "ffn_gate_shexp.weight", randn(shared_inter, H), "Q8_0")
            add(p + "ffn_up_shexp.weight", randn(shared_inter, H), "Q8_0")
            add(p + "ffn_down_shexp.weight", randn(H, shared_inter), "Q8_0")
            add(p + "ffn_gate_inp_shexp.weight", randn(H))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def transformers_dense_load(path, *, dtype=torch.float32, config=None):
    """The model through transformers' own GGUF loader, every tensor dequantized (the oracle and
    the baseline). from_pretrained(gguf_file=...) when accelerate is installed (it insists on
    it); otherwise the function from_pretrained calls for these architectures,
    load_gguf_checkpoint, into a model built on the meta device. config: given where
    transformers' GGUF config mapping lacks a key (Qwen2-MoE: moe_intermediate_size)."""
    import importlib.util
    import os

    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    if importlib.util.find_spec("accelerate") is not None:
        kw = {} if config is None else {"config": config}
        return AutoModelForCausalLM.from_pretrained(os.path.dirname(str(path)),
                                                    gguf_file=os.path.basename(str(path)),
                                                    dtype=dtype, **kw).eval()
    if config is None:
        config = AutoConfig.for_model(**load_gguf_checkpoint(str(path))["config"])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model,
                                   torch_dtype=dtype)["tensors"]
    result = model.load_state_dict(tensors, strict=False, assign=True)
    if result.missing_keys:
        raise AssertionError(f"transformers' GGUF loader left {result.missing_keys} unloaded")
    for name, module in list(model.named_modules()):  # inv_freq was computed on meta
        if type(module).__name__.endswith("RotaryEmbedding"):
            model.set_submodule(name, type(module)(config=model.config))
    model.tie_weights()
    return model.eval()


def dense_twin(model, path):
    """A copy of a from_gguf model with transformers' own sparse MoE blocks back in place of the
    argon ones, their expert stacks dequantized by the gguf package: the oracle for the
    architectures transformers' GGUF loader does not build (Mixtral, OLMoE)."""
    import gguf
    from transformers import AutoModelForCausalLM
    twin = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32).eval()
    state = {k: v for k, v in model.state_dict().items() if "_blocks" not in k}
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}

    def deq(name):
        t = tensors[name]
        return torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type)))

    for b in range(model.config.num_hidden_layers):
        p = f"blk.{b}."
        state[f"model.layers.{b}.mlp.experts.gate_up_proj"] = torch.cat(
            [deq(p + "ffn_gate_exps.weight"), deq(p + "ffn_up_exps.weight")], dim=1)
        state[f"model.layers.{b}.mlp.experts.down_proj"] = deq(p + "ffn_down_exps.weight")
    twin.load_state_dict(state, strict=True)
    return twin
