"""Host instructions per call of the plan's eager entry points, counted by valgrind's callgrind:
a deterministic figure for host-overhead work on a machine whose wall clock is too noisy for
differences of a few percent (the 2-core CI box; the lent H200's host drifts by 1.5x between
runs). CPU tensors, small T, so the counts are the call's overhead more than the kernel's work.

    python bench/lab/host_instructions.py [--n 400] [--T 1]

needs valgrind (callgrind) and a C compiler. The script builds a two-function helper library
(callgrind's client requests: zero and start counting, stop and dump), runs itself under
callgrind with counting off, and counts only the loop of each case; it prints instructions per
call, and each case's ratio to the tiny op (`x.add_(1)`, the eager-overhead baseline of
bench_cuda.py's plan_eager rows). Instructions are not time (cache misses, the allocator's locks
and the GIL's handoff weigh differently), so confirm a change on the H200 too.
"""
import argparse
import ctypes
import glob
import os
import subprocess
import sys
import tempfile

HELPER = r"""
#include <valgrind/callgrind.h>
void argon_count_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void argon_count_stop(const char* name) {
  CALLGRIND_STOP_INSTRUMENTATION;
  CALLGRIND_DUMP_STATS_AT(name);
}
"""


def cases(T):
    import torch
    import torch_argon
    from torch_argon import _C
    from torch_argon.plan import MoEPlan

    E, TM = 8, 16
    ids = torch.randint(0, E, (T, 2))
    w = torch.rand(T, 2)
    x = torch.zeros(1)
    plan = torch_argon.moe_plan(ids, w, E, TM)
    op, op_out = torch.ops.argon.moe_plan.default, torch.ops.argon.moe_plan_out.default
    return {
        "nothing": lambda: None,
        "tiny x.add_(1)": lambda: x.add_(1),
        "torch_argon.moe_plan": lambda: torch_argon.moe_plan(ids, w, E, TM),
        "torch_argon.moe_plan out=": lambda: torch_argon.moe_plan(ids, w, E, TM, out=plan),
        "_C.plan_fresh": lambda: _C.plan_fresh(MoEPlan, "argon", ids, w, E, TM),
        "argon moe_plan": lambda: op(ids, w, E, TM),
        "argon moe_plan_out": lambda: op_out(ids, w, E, TM, *plan[:7]),
    }


def count(helper, n, T):
    """Under callgrind: one dump per case, named after it."""
    lib = ctypes.CDLL(helper)
    for name, fn in cases(T).items():
        for _ in range(50):  # warm: first-call lookups, allocator caches
            fn()
        lib.argon_count_start()
        for _ in range(n):
            fn()
        lib.argon_count_stop(name.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=400, help="calls counted per case")
    ap.add_argument("--T", type=int, default=1, help="tokens (K = 2, E = 8)")
    ap.add_argument("--helper", help=argparse.SUPPRESS)  # set when re-run under callgrind
    args = ap.parse_args()
    if args.helper:
        count(args.helper, args.n, args.T)
        return
    with tempfile.TemporaryDirectory() as tmp:
        helper = os.path.join(tmp, "libcount.so")
        src = os.path.join(tmp, "count.c")
        with open(src, "w") as f:
            f.write(HELPER)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", helper, src], check=True)
        out = os.path.join(tmp, "callgrind.out")
        run = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                              f"--callgrind-out-file={out}", sys.executable,
                              os.path.abspath(__file__), "--n", str(args.n), "--T", str(args.T),
                              "--helper", helper], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"the run under callgrind failed:\n{run.stderr[-3000:]}")
        per_call = {}
        for path in glob.glob(out + ".*"):
            name = total = None
            with open(path) as f:
                for line in f:
                    if line.startswith("desc: Trigger: Client Request: "):
                        name = line.split(": ", 3)[3].strip()
                    elif line.startswith("totals:"):
                        total = int(line.split()[1])
            if name is not None and total is not None:
                per_call[name] = total / args.n
    tiny = per_call["tiny x.add_(1)"]
    print(f"instructions per call (callgrind, CPU tensors, T = {args.T}, {args.n} calls)")
    for name in sorted(per_call, key=per_call.get):
        print(f"{name:28s} {per_call[name]:9.0f}  {per_call[name] / tiny:5.2f} x tiny")


if __name__ == "__main__":
    main()
