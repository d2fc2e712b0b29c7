import importlib.util

import pytest
import torch

from torch_argon.testing import backends


def backend_params(names):
    """pytest params for backends by name; one that is not available here is skipped with its
    reason."""
    out = []
    for name in names:
        be = backends.get(name)
        marks = [] if be.available else [pytest.mark.skip(reason=f"{name}: {be.reason}")]
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def needs(package, what):
    """A skip mark for a test that needs an optional package (not a requirement of
    torch_argon: the GPU machine's image, a user's environment may lack it): the reason names
    the package and what the test uses it for."""
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"needs the {package} package ({what}): pip install {package}")


# The kernels under test: every backend but the reference itself.
KERNEL_BACKENDS = ("cpu", "metal_host", "cuda", "mps", "metal_cuda")


@pytest.fixture(params=backend_params(KERNEL_BACKENDS))
def backend(request):
    be = backends.get(request.param)
    if be.device == "cuda":
        torch.cuda.synchronize()
    return be


@pytest.fixture
def ref():
    return backends.get("reference").ops


def bits(t):
    """A tensor's raw bits, so equality is bit for bit (-0.0 != 0.0, NaN == same NaN)."""
    t = t.detach().cpu().contiguous()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(view)


def assert_bits_equal(actual, expected, name=""):
    a, e = bits(actual), bits(expected)
    assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    if not torch.equal(a, e):
        diff = (a != e).nonzero()
        first = tuple(diff[0].tolist())
        raise AssertionError(
            f"{name}: {diff.shape[0]} of {a.numel()} elements differ; first at {first}: "
            f"{actual.detach().cpu()[first]} != {expected.detach().cpu()[first]}"
        )


# ---- the GPU machine's run (bench/h200_tests.sh): what the CPU CI does not cover ------------
#
# `pytest --gpu-run` keeps the tests that can reach a CUDA kernel: every parametrization on a
# CUDA backend (cuda, metal_cuda) and every test with no backend of its own, except those marked
# cpu_only. It deselects the CPU backends' parametrizations (cpu, metal_host, reference; mps,
# which the GPU machine lacks) and the cpu_only tests: CI runs those on every push.

GPU_RUN_DROPS_BACKENDS = ("cpu", "metal_host", "reference", "mps")
# Node-id prefixes of the CPU-only tests (marked cpu_only here, in one place): exhaustive sweeps
# of the CPU reference and the host lane runner, the Triton interpreter runs, static checks of
# files and scripts, the CPU main job and bench smoke runs, the CPU integrations.
CPU_ONLY = (
    "tests/test_quant_reference.py", "tests/test_metal_host.py", "tests/test_metal_strict.py",
    "tests/test_metal_signatures.py", "tests/test_plan_properties.py",
    "tests/test_triton_mm.py::test_triton_interpreter_cpu",
    "tests/test_quant_triton.py::test_quant_triton_interpreter_cpu",
    "tests/test_main_job.py", "tests/test_scripts.py", "tests/test_readme.py",
    "tests/test_harness.py", "tests/test_bench_json.py", "tests/test_install.py",
    "tests/test_gemm_sweep_logic.py", "tests/test_nn.py::test_bench_layer_runs_on_cpu",
    "tests/test_transformers.py", "tests/test_patch_nothing.py", "tests/test_gguf.py",
    "tests/test_gguf_transformers.py", "tests/test_cpu_experts.py", "tests/test_distributed.py",
    "tests/test_gpu_run.py", "tests/test_cpu_threads.py", "tests/test_op_arguments.py",
    "tests/test_fakes.py::test_compiled_misuse_fails_while_tracing",
    "tests/test_gradients.py::test_gradcheck", "tests/test_gradients.py::test_layer_gradcheck",
    "tests/test_gradients.py::test_cpu_gradients_do_not_depend_on_the_thread_count",
    "tests/test_gradients.py::test_moe_mm_weight_grad_refuses_an_expert_beyond_n_expert",
    "tests/test_gradients.py::test_expert_parallel_refuses_gradients",
    "tests/test_gradients.py::test_registry_takes_the_ops_path_when_autograd_records",
    "tests/test_gradients.py::test_router_top_k_is_torch_topk_when_autograd_records",
)


def pytest_addoption(parser):
    parser.addoption("--gpu-run", action="store_true",
                     help="the GPU machine's run: only the tests that can reach a CUDA kernel "
                          "(tests/conftest.py says which; bench/h200_tests.sh runs it)")


def _cpu_side(item):
    if item.get_closest_marker("cpu_only"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(params.get(key) in GPU_RUN_DROPS_BACKENDS for key in ("backend", "device"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(CPU_ONLY):
            item.add_marker(pytest.mark.cpu_only)
    if not config.getoption("--gpu-run"):
        return
    dropped = [item for item in items if _cpu_side(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        dropped_ids = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in dropped_ids]

