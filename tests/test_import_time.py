"""`import torch_argon` costs at most 1.2x `import torch` (issue 42 item 14): Triton, and the
torch._inductor / torch._dynamo its ops' registration pulls in, are imported when CUDA starts or
at the first use of the Triton kernels (torch_argon/triton_ops/__init__.py), never by the import.
Each round is a fresh interpreter that times `import torch`, then `import torch_argon` on top of
it: the two parts of a round are seconds apart, so a load spike on a shared CI machine rarely
hits one and not the other (timing them in separate interpreters failed CI at 1.28x where the
in-process ratio is 1.06x); the median over rounds drops the round it does hit."""
import subprocess
import sys

import pytest

ROUNDS = 5
MAX_RATIO = 1.2


def _run(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def _import_seconds_torch_then_argon():
    torch_s, argon_s = _run("import time; t0 = time.perf_counter(); import torch; "
                            "t1 = time.perf_counter(); import torch_argon; "
                            "print(t1 - t0, time.perf_counter() - t1)")[-2:]
    return float(torch_s), float(argon_s)


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
    timed = [_import_seconds_torch_then_argon() for _ in range(ROUNDS)]
    rounds = sorted(((torch_s + argon_s) / torch_s, torch_s, argon_s)
                    for torch_s, argon_s in timed)
    ratio, torch_s, argon_s = rounds[len(rounds) // 2]
    assert ratio <= MAX_RATIO, (f"import torch_argon adds {argon_s:.2f} s to import torch's "
                                f"{torch_s:.2f} s: {ratio:.2f}x (median of {ROUNDS} rounds)")
