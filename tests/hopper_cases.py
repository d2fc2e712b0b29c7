"""What the Hopper experts' tests share (tests/test_cuda_hopper_dense.py: the ptr-array grouped
GEMM; tests/test_cuda_hopper_padded.py: the padded-plan GEMM): whether the Hopper units run
here, small expert stacks, a call that stands for a CUDA one on any machine, the H200 stand-in
fixture, layer cases with their reference, CUDA graph capture, bitwise comparison, the
benchmark module and the C headers' configuration lists."""
import importlib.util
import os
import re
from types import SimpleNamespace

import pytest
import torch

import torch_argon
from routing_cases import make_ids, make_weights
from torch_argon import hopper, reference
from torch_argon.experts import ExpertsCall, cuda_hopper_dense
from torch_argon.weights import DenseExperts

REL_TOL = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}  # the Triton GEMMs' (triton_cases.py)


def hopper_refusal():
    return hopper.refusal("cuda") if torch.cuda.is_available() else "no CUDA device"


def needs_kernel(why_not: str):
    """The mark of the tests that need a Hopper kernel: skipped where it does not run (why_not,
    its refusal), except where ARGON_REQUIRE_HOPPER=1 (the device runs of bench/h200_mixed.sh
    and h200_act.sh): there a kernel that does not run is an error at collection, so a build
    that lost its units cannot pass as 0 failures."""
    if why_not and os.environ.get("ARGON_REQUIRE_HOPPER") == "1":
        raise RuntimeError(f"ARGON_REQUIRE_HOPPER=1 and the kernel does not run here: {why_not}")
    return pytest.mark.skipif(bool(why_not), reason=why_not or "runs")


needs_hopper = needs_kernel(hopper_refusal())


def dense_experts(E=4, H=64, I=32, dtype=torch.bfloat16, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    gu = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5
    dn = torch.randn(E, H, I, generator=g) / I ** 0.5
    return DenseExperts(gu.to(dtype).to(device), dn.to(dtype).to(device))


def cuda_call(experts, T=64, K=2, dtype=torch.bfloat16, tile_m=None):
    """A call whose x stands for a CUDA tensor (its device, dtype and shape: what supports()
    and auto_refusal read; this machine may have no GPU)."""
    x = SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=(T, experts.hidden),
                        requires_grad=False)
    return ExpertsCall.of(x, experts, ops=torch_argon.argon_ops, n_entries=T * K, tile_m=tile_m)


@pytest.fixture
def on_h200(monkeypatch):
    """supports() past its device checks, on a GPU named "NVIDIA H200" (both Hopper
    implementations read the device name through cuda_hopper_dense)."""
    monkeypatch.setattr(cuda_hopper_dense.hopper, "refusal", lambda device: "")
    monkeypatch.setattr(cuda_hopper_dense, "device_name", lambda device: "NVIDIA H200")


def padded_fake_args(N, tiles=3, K=64, E=4, dtype=torch.bfloat16):
    """(fake mode, (a, w [E, N, K], tile_expert, meta)) of a padded plan of `tiles` 128-row
    tiles, for the padded ops' fakes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    with mode:
        return mode, (torch.empty(tiles * 128, K, dtype=dtype),
                      torch.empty(E, N, K, dtype=dtype), torch.empty(tiles, dtype=torch.int32),
                      torch.empty(4, dtype=torch.int32))


def assert_padded_argument_errors(op, a, w, tile_expert, meta, *after_config):
    """The argument errors the padded ops share, each a ValueError naming the argument, from
    op(a, w, tile_expert, meta, config, *after_config) with one argument wrong."""
    cases = [((a, w[:, :, :32], tile_expert, meta, 1), "w's last dimension"),
             ((a[:-1], w, tile_expert, meta, 1), "128 rows per tile of tile_expert"),
             ((a, w, tile_expert[:2], meta, 1), "128 rows per tile of tile_expert"),
             ((a, w, tile_expert.long(), meta, 1), "tile_expert must be the plan's int32"),
             ((a, w, tile_expert, meta[:3], 1), r"meta must be int32 of shape \[4\]"),
             ((a, w, tile_expert, meta, 2), "config must be in")]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            op(*args, *after_config)


def layer_case(dtype, T=300, K=4, E=8, H=256, I=128, dist="uniform", seed=1):
    experts = dense_experts(E, H, I, dtype, "cuda", seed)
    x = (torch.randn(T, H) * 0.5).to(dtype).cuda()
    ids = make_ids(T, K, E, dist, seed=seed).cuda()
    w = make_weights(T, K, seed=seed).cuda()
    return x, ids, w, experts


def reference_experts(x, ids, w, experts, activation="silu"):
    cpu = DenseExperts(experts.gate_up.cpu(), experts.down.cpu())
    return reference.moe_layer(x.cpu(), None, cpu, ids.shape[1], topk_ids=ids.cpu(),
                               topk_weights=w.cpu(), activation=activation)


def capture(run):
    """(graph, its output): run() captured in a CUDA graph after a warm-up off the default
    stream (as capture wants)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    return graph, captured


def assert_bits_equal(got, want):
    assert torch.equal(got.cpu().view(torch.int16), want.cpu().view(torch.int16))


def bench_hopper():
    """bench/bench_hopper.py as a module (its table-row suggestions are tested)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                        "bench_hopper.py")
    spec = importlib.util.spec_from_file_location("bench_hopper", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def header_configs(header):
    """([(index, name)] of the configuration list in csrc/hopper/<header>'s comments, the
    header's text)."""
    path = os.path.join(os.path.dirname(torch_argon.__file__), "csrc", "hopper", header)
    with open(path) as f:
        text = f.read()
    return [(int(i), name) for i, name in re.findall(r'^//\s+(\d+) "(\w+)"', text, re.M)], text


# ---- the experts path's checks, for either Hopper implementation (path=its name) -------------

def experts_path(path, x, ids, w, experts, **kwargs):
    return torch_argon.moe_experts(x, ids, w, experts, path=path, **kwargs)


def check_path_matches_the_reference(path, dtype, dist, T):
    from triton_cases import rel_err
    x, ids, w, experts = layer_case(dtype, T=T, dist=dist)
    got = experts_path(path, x, ids, w, experts)
    want = reference_experts(x, ids, w, experts)
    assert got.shape == want.shape
    assert rel_err(got, want) < REL_TOL[dtype]


def check_path_activation(path, activation):
    from triton_cases import rel_err
    x, ids, w, experts = layer_case(torch.bfloat16)
    got = experts_path(path, x, ids, w, experts, activation=activation)
    assert rel_err(got, reference_experts(x, ids, w, experts, activation)) < 1.5e-2


def assert_replays_like_eager(run, x):
    """run() (reading x) captured in a CUDA graph: a replay after x changed in place gives the
    eager call's bits on the new x, and on the old x again its first result. Returns that
    first eager result."""
    eager = run()
    graph, captured = capture(run)
    x.copy_(x * -1)  # new inputs in the same buffers
    graph.replay()
    assert torch.equal(captured, run())
    x.copy_(x * -1)
    graph.replay()
    assert torch.equal(captured, eager)
    return eager


def check_graph_replay_equals_eager(path):
    x, ids, w, experts = layer_case(torch.bfloat16, T=256)
    assert_replays_like_eager(lambda: experts_path(path, x, ids, w, experts), x)


def check_compile_fullgraph_matches_eager(path):
    x, ids, w, experts = layer_case(torch.bfloat16, T=128)

    def run(x, ids, w):
        return experts_path(path, x, ids, w, experts)

    compiled = torch.compile(run, fullgraph=True)
    assert torch.equal(compiled(x, ids, w), run(x, ids, w))
