"""`import torch_argon` costs at most 1.2x `import torch` (issue 42 item 14): Triton, and the
torch._inductor / torch._dynamo its ops' registration pulls in, are imported when CUDA starts or
at the first use of the Triton kernels (torch_argon/triton_ops/__init__.py), never by the import.
Each import is timed in a fresh interpreter, the two interleaved, best of a few rounds."""
import subprocess
import sys

import pytest

ROUNDS = 3
MAX_RATIO = 1.2


def _run(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def _import_seconds(module):
    return float(_run("import time; t = time.perf_counter(); import " + module +
                      "; print(time.perf_counter() - t)")[-1])


def test_import_leaves_triton_and_the_compiler_unimported():
    heavy = ("triton", "torch._inductor", "torch._dynamo")
    loaded = _run("import sys, torch_argon; print(' '.join(m for m in " + repr(heavy) +
                  " if m in sys.modules) or '-')")
    assert loaded == ["-"], f"import torch_argon imported {loaded}"


def test_triton_kernels_load_at_first_use():
    """Asking for them imports Triton (where it is installed) and registers their ops."""
    pytest.importorskip("triton")
    got = _run("import sys, torch, torch_argon; from torch_argon import triton_ops\n"
               "before = 'triton' in sys.modules\n"
               "print(before, triton_ops.AVAILABLE, hasattr(torch.ops.argon, 'moe_mm_triton'),"
               " 'triton' in sys.modules)")
    assert got == ["False", "True", "True", "True"]


def test_import_costs_at_most_a_fifth_more_than_torch():
    torch_s, argon_s = [], []
    for _ in range(ROUNDS):  # interleaved: a load spike hits both
        torch_s.append(_import_seconds("torch"))
        argon_s.append(_import_seconds("torch_argon"))
    ratio = min(argon_s) / min(torch_s)
    assert ratio <= MAX_RATIO, (f"import torch_argon {min(argon_s):.2f} s against import torch "
                                f"{min(torch_s):.2f} s: {ratio:.2f}x")
