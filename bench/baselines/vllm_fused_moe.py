"""vLLM's Triton fused_moe as a benchmark baseline for torch_argon's experts path (issues 43, 45):
vLLM's own kernel file and tuned config files, staged by bench/baselines/stage_vllm.sh into
.baselines/vllm/ (gitignored; carried to the GPU machine, which has no network), loaded by path.

    from bench.baselines import vllm_fused_moe
    ok, why = vllm_fused_moe.available()
    experts = vllm_fused_moe.make_experts(w_gate_up, w_down, "silu", torch.bfloat16, "cuda")
    y = experts(x, topk_weights, topk_ids)          # [T, H], what torch_argon.moe_experts gives

What runs: vLLM's `fused_experts_impl` (its driver: the config lookup, the buffers, the
alignment, gate/up GEMM, activation, down GEMM with the routing weights, the top-k sum) with
vLLM's `fused_moe_kernel` for both GEMMs and the config vLLM picks for (E, N = expert width,
device name, M = tokens): its tuned file `E=..,N=..,device_name=...json` when one exists (the
entry nearest M), else vLLM's default rule. The compiled vLLM ops between the GEMMs
(moe_align_block_size, silu_and_mul and its gelu forms, moe_sum) are replaced by equivalents
(vllm_glue.py) that run inside the timed path; the vllm modules the two files import are
stand-ins (vllm_stubs.py). So the comparison is our whole experts path against vLLM's Triton
GEMM kernel with its configs plus equivalent glue.

Weights: torch_argon's [E, 2I, H] gate/up stack (gate rows first, then up rows) and [E, H, I]
down stack are vLLM's w13 and w2 layouts as they are; make_experts only casts and makes them
contiguous, once, outside the timed call. Routing: ids in [0, E) (vLLM's path without an expert
map takes no -1 ids); any integer dtype; weights are cast to float32 as vLLM's router gives
them. T = 0 returns an empty [0, H] without launching anything (vLLM's driver would launch
empty grids).

ARGON_VLLM_DIR: another staged folder (default: .baselines/vllm/ at the checkout's root).
"""
import importlib.util
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(ROOT, ".baselines", "vllm")
# the vLLM version whose fused_experts_impl and imports the stand-ins were written for
KNOWN_VERSIONS = ("0.33.0",)
STAGE_HINT = "run `bash bench/baselines/stage_vllm.sh` (downloads vLLM's wheel from PyPI once)"
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
_loaded = {}


def staged_dir():
    return os.environ.get("ARGON_VLLM_DIR") or DEFAULT_DIR


def staged_version():
    """The staged folder's VERSION.json record (None when nothing is staged)."""
    path = os.path.join(staged_dir(), "VERSION.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def staging_problem():
    """Why the staged kernel file cannot be loaded ("" when it can): nothing staged, another
    version than the stand-ins know, a file missing, or no triton."""
    record = staged_version()
    if record is None:
        return f"no vLLM fused_moe staged in {staged_dir()}: {STAGE_HINT}"
    if record.get("vllm") not in KNOWN_VERSIONS:
        return (f"the staged vLLM is {record.get('vllm')}; the adapter's stand-ins are written "
                f"for {', '.join(KNOWN_VERSIONS)}: stage that version")
    for rel in ("fused_moe/fused_moe.py", "fused_moe/moe_align_block_size.py"):
        if not os.path.exists(os.path.join(staged_dir(), rel)):
            return f"{rel} is missing from {staged_dir()}: {STAGE_HINT}"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    return ""


def available():
    """(True, "") when the staged vLLM kernel can run here, else (False, why)."""
    why = staging_problem()
    if not why and not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        why = "no CUDA device (on the CPU, only under TRITON_INTERPRET=1)"
    return not why, why


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


def kernel_module():
    """The staged fused_moe.py, loaded once per process (after moe_align_block_size.py, which it
    imports), with the stand-ins in place."""
    if "fused_moe" not in _loaded:
        why = staging_problem()
        if why:
            raise RuntimeError(f"the vLLM baseline cannot load: {why}")
        from . import vllm_stubs
        vllm_stubs.install()
        pkg, folder = vllm_stubs.PKG, os.path.join(staged_dir(), "fused_moe")
        _load_file(pkg + ".moe_align_block_size", os.path.join(folder, "moe_align_block_size.py"))
        _loaded["fused_moe"] = _load_file(pkg + ".fused_moe", os.path.join(folder, "fused_moe.py"))
    return _loaded["fused_moe"]


def chosen_config(w_gate_up, w_down, top_k, dtype, M):
    """(config dict, its source) vLLM takes for M tokens: source is the tuned file's name when
    one exists for (E, N, this device), else "default" (vLLM's rule for untuned shapes)."""
    fm = kernel_module()
    dtype_str = fm._get_config_dtype_str(dtype=dtype)
    E, _, N = w_down.shape
    tuned = fm.get_moe_configs(E, N, dtype_str, 0, 0)
    config = fm.try_get_optimal_moe_config(tuple(w_gate_up.shape), tuple(w_down.shape), top_k,
                                           dtype_str, M)
    return dict(config), (fm.get_config_file_name(E, N, dtype_str) if tuned else "default")


def check_weights(w_gate_up, w_down):
    """ValueError naming the argument when the stacks are not [E, 2I, H] and [E, H, I]."""
    if w_gate_up.dim() != 3 or w_down.dim() != 3:
        raise ValueError(f"w_gate_up and w_down must be 3-D stacks [E, 2I, H] and [E, H, I], "
                         f"got {tuple(w_gate_up.shape)} and {tuple(w_down.shape)}")
    E, two_i, H = w_gate_up.shape
    if two_i % 2 or tuple(w_down.shape) != (E, H, two_i // 2):
        raise ValueError(f"w_down must be [E, H, I] = [{E}, {H}, {two_i // 2}] for w_gate_up "
                         f"{tuple(w_gate_up.shape)}, got {tuple(w_down.shape)}")


def make_experts(w_gate_up, w_down, activation="silu", dtype=torch.bfloat16, device="cuda"):
    """A function (x [T, H], topk_weights [T, K], topk_ids [T, K]) -> [T, H] running vLLM's
    Triton fused_moe on these experts (see the module docstring). The weights are cast to
    `dtype` on `device` and made contiguous here, once."""
    check_weights(w_gate_up, w_down)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"dtype must be bfloat16, float16 or float32, got {dtype}")
    fm = kernel_module()
    w1 = w_gate_up.to(device=device, dtype=dtype).contiguous()
    w2 = w_down.to(device=device, dtype=dtype).contiguous()

    def experts(x, topk_weights, topk_ids):
        if x.dim() != 2 or x.shape[1] != w1.shape[2]:
            raise ValueError(f"x must be [T, H] with H = {w1.shape[2]}, got {tuple(x.shape)}")
        if topk_ids.shape != topk_weights.shape or topk_ids.shape[0] != x.shape[0]:
            raise ValueError(f"topk_ids {tuple(topk_ids.shape)} and topk_weights "
                             f"{tuple(topk_weights.shape)} must both be [T, K] with T = "
                             f"{x.shape[0]}")
        if x.shape[0] == 0:
            return x.new_empty(0, x.shape[1])
        return fm.fused_experts_impl(x.contiguous(), w1, w2, topk_weights.float().contiguous(),
                                     topk_ids, activation=activation)

    experts.w1, experts.w2 = w1, w2
    return experts


def version_record():
    """What the benchmark records about the baseline: the staged version and wheel."""
    record = staged_version() or {}
    return {k: record.get(k) for k in ("vllm", "wheel", "wheel_sha256", "staged_utc")}
