"""`pytest --gpu-run` (bench/h200_tests.sh): the GPU machine runs the tests that can reach a CUDA
kernel and leaves the CPU backends' parametrizations and the cpu_only tests to CI."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected(*runs):
    """The test ids each pytest argument list in `runs` collects (one process: one import of
    torch_argon and the test modules for all of them)."""
    script = ("import sys, pytest\n"
              f"for args in {[list(r) for r in runs]!r}:\n"
              "    print('== run', flush=True)\n"
              "    pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', *args])\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    outputs = done.stdout.split("== run\n")[1:]
    assert len(outputs) == len(runs), done.stdout[-2000:]
    return [[line for line in out.splitlines() if "::" in line] for out in outputs]


def test_the_gpu_run_keeps_what_can_reach_cuda_and_drops_what_ci_runs():
    files = ["tests/test_swiglu.py", "tests/test_triton_mm.py", "tests/test_readme.py"]
    everything, gpu, only = collected(files, ["--gpu-run", *files], ["-m", "cpu_only", *files])
    assert set(gpu) < set(everything)
    cuda = [i for i in everything if "[cuda" in i or "-cuda" in i or "metal_cuda" in i]
    assert cuda and set(cuda) <= set(gpu)
    params = [i.split("[", 1)[1] for i in gpu if "[" in i]
    for backend in ("cpu", "metal_host", "reference", "mps"):
        assert not [p for p in params if backend in p.rstrip("]").split("-")], backend
    assert not [i for i in gpu if "interpreter_cpu" in i or "test_readme.py" in i]
    # a test without a backend of its own that is not cpu_only stays (CUDA-only tests are so)
    assert any(i.startswith("tests/test_triton_mm.py::test_config_table_lookup") for i in gpu)
    # the mark is registered and selects
    assert only and all(i.startswith(("tests/test_readme.py",
                                      "tests/test_triton_mm.py::test_triton_interpreter_cpu"))
                        for i in only)
