"""Small work stays on the caller's thread (issue 42 item 16): a CPU kernel wakes other threads
only for work that pays for it. A parallel region that runs on several threads costs
microseconds on an idle machine and milliseconds when other processes hold the cores (moe_plan
at T = 0 with E = 128: ~12 ms a call on a busy 2-core host). Such regions are counted, not
timed: a shim wraps libgomp's GOMP_parallel (the call every `#pragma omp parallel` compiles to,
ours and the BLAS's) through LD_PRELOAD in a fresh process running 4 torch threads, and counts
the regions whose team has more than one thread. The large call of each kernel shows that the
count sees its regions.

The grouped GEMMs keep one region for a small call: their GEMMs are torch's (MKL), which opens
regions of its own for any size when called outside one (2 for a 4x32x32 torch.mm here), and
runs sequentially inside ours."""
import json
import os
import shutil
import subprocess
import sys

import pytest

# The team size is read by the region's first thread, through the libgomp the process loaded
# (torch's: the shim must not link one of its own, which would take its place).
SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
typedef void (*region_fn)(void (*)(void*), void*, unsigned, unsigned);
typedef int (*int_fn)(void);
static long wide_regions;
static int_fn team_size, thread_num;
long argon_wide_regions(void) { return __atomic_load_n(&wide_regions, __ATOMIC_SEQ_CST); }
struct call { void (*fn)(void*); void* data; };
static void counted(void* p) {
  struct call* c = p;
  if (thread_num() == 0 && team_size() > 1) __atomic_add_fetch(&wide_regions, 1, __ATOMIC_SEQ_CST);
  c->fn(c->data);
}
void GOMP_parallel(void (*fn)(void*), void* data, unsigned n, unsigned flags) {
  static region_fn real;
  if (!real) {
    team_size = (int_fn)dlsym(RTLD_NEXT, "omp_get_num_threads");
    thread_num = (int_fn)dlsym(RTLD_NEXT, "omp_get_thread_num");
    real = (region_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
  }
  struct call c = {fn, data};
  real(counted, &c, n, flags);
}
"""

# Each case: (small call, large call), run in the child with torch, torch_argon and `ops` (the
# argon OpSet) in scope; `mk(T, K, E)` makes a routing.
CASES = {
    "moe_plan": ("ops.moe_plan(*mk(0, 8, 128), 128, 1); ops.moe_plan(*mk(1, 8, 128), 128, 1); "
                 "ops.moe_plan(*mk(64, 8, 4096), 4096, 16)",
                 "ops.moe_plan(*mk(8192, 8, 128), 128, 16)"),
    "moe_mm": ("p = ops.moe_plan(*mk(4, 2, 8), 8, 1); "
               "ops.moe_mm(torch.randn(p.sorted_token.shape[0], 32), torch.randn(8, 32, 32), p)",
               "p = ops.moe_plan(*mk(2048, 2, 8), 8, 1); "
               "ops.moe_mm(torch.randn(p.sorted_token.shape[0], 256), torch.randn(8, 256, 256), p)"),
    "moe_qmm": ("p = ops.moe_plan(*mk(4, 2, 8), 8, 1); "
                "w = quant.random_quantized('Q8_0', 32, 64, leading=(8,)); "
                "ops.moe_qmm(torch.randn(p.sorted_token.shape[0], 64), w, 'Q8_0', 64, p)",
                "p = ops.moe_plan(*mk(1024, 2, 8), 8, 1); "
                "w = quant.random_quantized('Q8_0', 256, 256, leading=(8,)); "
                "ops.moe_qmm(torch.randn(p.sorted_token.shape[0], 256), w, 'Q8_0', 256, p)"),
    "moe_gather": ("p = ops.moe_plan(*mk(4, 2, 8), 8, 1); ops.moe_gather(torch.randn(4, 64), p)",
                   "p = ops.moe_plan(*mk(4096, 2, 8), 8, 1); "
                   "ops.moe_gather(torch.randn(4096, 1024), p)"),
    "moe_combine": ("p = ops.moe_plan(*mk(4, 2, 8), 8, 1); "
                    "ops.moe_combine(torch.randn(p.sorted_token.shape[0], 64), p, mk(4, 2, 8)[1])",
                    "p = ops.moe_plan(*mk(4096, 2, 8), 8, 1); "
                    "ops.moe_combine(torch.randn(p.sorted_token.shape[0], 1024), p, "
                    "mk(4096, 2, 8)[1])"),
    "swiglu": ("ops.swiglu(torch.randn(4, 128))", "ops.swiglu(torch.randn(4096, 2048))"),
    "dequantize": ("ops.dequantize(quant.random_quantized('Q8_0', 4, 64), 'Q8_0', 64)",
                   "ops.dequantize(quant.random_quantized('Q8_0', 4096, 1024), 'Q8_0', 1024)"),
}

CHILD = r"""
import ctypes, json, sys, torch
from torch_argon import quant
from torch_argon.ops import argon_ops as ops
torch.set_num_threads(4)
regions = ctypes.CDLL(None).argon_wide_regions
def mk(T, K, E):
    g = torch.Generator().manual_seed(T)
    return torch.randint(0, E, (T, K), generator=g), torch.rand(T, K, generator=g)
counts = {}
for name, (small, large) in json.loads(sys.argv[1]).items():
    for size, code in (("small", small), ("large", large)):
        exec(code)  # once to warm up (first-call allocations, lazy initialisation)
        before = regions()
        exec(code)
        counts[f"{name} {size}"] = regions() - before
print(json.dumps(counts))
"""


def _compiler():
    return shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="module")
def region_counts(tmp_path_factory):
    if not sys.platform.startswith("linux"):
        pytest.skip("counts regions by preloading a libgomp wrapper: Linux only")
    if _compiler() is None:
        pytest.skip("no C compiler (cc / gcc) to build the region-counting shim")
    d = tmp_path_factory.mktemp("omp_shim")
    (d / "shim.c").write_text(SHIM)
    subprocess.run([_compiler(), "-shared", "-fPIC", "-O2", str(d / "shim.c"), "-o",
                    str(d / "shim.so"), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(d / "shim.so"), OMP_NUM_THREADS="4")
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


GEMMS = ("moe_mm", "moe_qmm")  # one region at most for a small call (module doc)


@pytest.mark.parametrize("name", CASES)
def test_small_calls_wake_no_other_thread(region_counts, name):
    assert region_counts[f"{name} large"] > 0, "the shim saw no region of the large call"
    most = 1 if name in GEMMS else 0
    assert region_counts[f"{name} small"] <= most, region_counts
