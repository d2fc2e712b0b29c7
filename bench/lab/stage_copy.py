"""plan_grid.cuh with clock64 hooks at the kernel's step boundaries, for plan_stage_lab.cu:
thread 0 of each block writes g_stage[block * 16 + k] (k = 0-8 the steps, 9 inside the
exchange step (after its cluster wait, where the kernel has one there), 12-15 inside the
offsets step); slots 10 and 11 take %globaltimer at entry and exit. The anchors are comment
and code lines of the kernel; a missing one stops the copy.

Usage: python3 stage_copy.py plan_grid.cuh out.cuh"""
import sys

src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
STEPS = [  # (anchor, hook after (+) or before (-) it)
    ("  const int E = p.E;\n", "+", "LAB_T(10) LAB_STAGE(0)"),
    ("  chunk_keys_and_weights<C>(p, loads, kAbsent, key, wv, bad);\n  __syncthreads();\n", "+",
     "LAB_STAGE(1)"),
    ("  if (lane == 0 && bad != 0) atomicAdd(&s_bad, bad);              // on every run\n"
     "  __syncthreads();\n", "+", "LAB_STAGE(2)"),
    ("  // 4. Per column:", "-", "LAB_STAGE(3)"),
    ("  // The rank of each entry this replica places", "-", "LAB_STAGE(4)"),
    ("  // 6. Placement of this block's entries", "-", "LAB_STAGE(5)"),
    ("  // 7. Tiles and padding rows", "-", "LAB_STAGE(6)"),
]
INSIDE_OFFSETS = [  # hooked before each anchor (a tuple: the first found, for older kernels)
    (("  // The totals and this block's prefix, four columns per thread (threads below quads).\n",
      "  // Thread m owns columns 4m .. 4m + 3, so thread order is expert order for the scan below.\n"),
     "LAB_STAGE(12)"),
    ("  // 5. Padded offsets", "LAB_STAGE(13)"),
    ("  const bool writer = b == 0;  // every block has the same values\n", "LAB_STAGE(14)"),
    ("  __syncthreads();\n\n  // 6. Placement", "LAB_STAGE(15)"),
]
OPTIONAL = [  # hooked after each anchor where the kernel has it (older kernels do not)
    ("    cluster_wait();  // every block's exchange barrier is initialised, its accumulators "
     "zeroed\n", "LAB_STAGE(9)"),
]
EXITS = [  # the exit's cluster wait, in the kernel's versions since session 15
    "#ifdef ARGON_PLAN_CLUSTERS\n  if (cluster_exchange) cluster_wait();  // copies may read s_cnt "
    "until every block arrived\n#endif\n",
    "#ifdef ARGON_PLAN_CLUSTERS\n  if (cluster_exchange) cluster_wait();  // adds may read s_cnt "
    "until every block arrived\n#endif\n",
]


def hook(anchor, line, after):
    global s
    if isinstance(anchor, tuple):
        anchor = next((a for a in anchor if s.count(a) == 1), anchor[0])
    assert s.count(anchor) == 1, f"anchor not found once: {anchor!r}"
    s = s.replace(anchor, anchor + line if after else line + anchor)


exit_anchor = [e for e in EXITS if s.count(e) == 1]
assert len(exit_anchor) == 1, "the exit's cluster wait not found"
hook(exit_anchor[0], "  LAB_STAGE(7)\n", after=False)
hook(exit_anchor[0], "  LAB_STAGE(8) LAB_T(11)\n", after=True)
for anchor, name in INSIDE_OFFSETS:
    hook(anchor, "  " + name + "\n", after=False)
for anchor, name in OPTIONAL:
    if s.count(anchor) == 1:
        s = s.replace(anchor, anchor + "    " + name + "\n")
for anchor, where, name in STEPS:
    hook(anchor, "  " + name + "\n", after=where == "+")
PRELUDE = """#include <cstdint>
__device__ long long* g_stage = nullptr;
#define LAB_STAGE(k) if (threadIdx.x == 0) g_stage[blockIdx.x * 16 + (k)] = clock64();
#define LAB_T(k) if (threadIdx.x == 0) { unsigned long long t_; \\
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); g_stage[blockIdx.x * 16 + (k)] = t_; }
"""
s = s.replace("#pragma once\n", "#pragma once\n" + PRELUDE, 1)
open(dst, "w").write(s)
