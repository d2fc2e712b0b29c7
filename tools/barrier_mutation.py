"""Barrier-deletion mutation check for the plan kernels (or another .metal file's kernels).

For every threadgroup_barrier in plan_hist, plan_scan and plan_place (torch_argon/metal/plan.metal):
delete that one call, rebuild the extension (ninja: only the host unit of plan.metal recompiles),
run the metal_host plan tests, and record whether they fail ("killed") or pass ("SURVIVED").
The original file is restored (and rebuilt) whatever happens. Exit status 1 if any mutant
survived or a step broke.

    python tools/barrier_mutation.py [--tests 'pytest args']
    python tools/barrier_mutation.py --metal torch_argon/metal/moe_qmm.metal --kernels moe_qmm \
        --tests "tests/test_quant_ops.py -k 'metal_every_lane_schedule' -x -q"

A deleted barrier is caught deterministically by the forward or the reverse lane schedule of
tests/test_metal_host.py (see its docstring), and often by the free schedule as well.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAN = os.path.join(ROOT, "torch_argon", "metal", "plan.metal")
KERNELS = ("plan_hist", "plan_scan", "plan_place")
DEFAULT_TESTS = "tests/test_metal_host.py tests/test_plan.py -k 'plan and metal_host' -x -q"


def barrier_sites(lines, kernels=KERNELS):
    """(line index, kernel) of each threadgroup_barrier call inside the given kernels."""
    sites, kernel = [], None
    for i, line in enumerate(lines):
        m = re.match(r"kernel void (\w+)\(", line)
        if m:
            kernel = m.group(1)
        if "threadgroup_barrier(" in line and not line.lstrip().startswith("//") and kernel in kernels:
            sites.append((i, kernel))
    return sites


def run(cmd, timeout):
    t0 = time.time()
    p = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr, time.time() - t0


def build():
    env = "MAX_JOBS=2 ARGON_TEST_BUILD=1 "  # the host runner is in torch_argon._C_test
    rc, out, secs = run(env + f"{shlex.quote(sys.executable)} setup.py build_ext --inplace", 3600)
    if rc != 0:
        print(out[-3000:])
    return rc == 0, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", default=DEFAULT_TESTS, help="pytest arguments")
    ap.add_argument("--metal", default=PLAN, help="the .metal file to mutate")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="its kernels, comma-separated")
    args = ap.parse_args()
    kernels = tuple(args.kernels.split(","))
    path, name = args.metal, os.path.basename(args.metal)

    original = open(path).read()
    lines = original.splitlines(keepends=True)
    sites = barrier_sites(lines, kernels)
    print(f"{len(sites)} barriers in {', '.join(kernels)}")
    results = []
    try:
        for idx, kernel in sites:
            mutated = list(lines)
            # Same line count, so the sites of the other barriers keep their line numbers.
            mutated[idx] = "  // threadgroup_barrier deleted by tools/barrier_mutation.py\n"
            open(path, "w").write("".join(mutated))
            ok, build_s = build()
            if not ok:
                results.append((kernel, idx + 1, "BUILD FAILED", ""))
                continue
            rc, out, test_s = run(f"{shlex.quote(sys.executable)} -m pytest {args.tests}", 3600)
            failed = [l for l in out.splitlines() if l.startswith("FAILED")]
            verdict = "killed" if rc != 0 and failed else ("SURVIVED" if rc == 0 else f"pytest rc {rc}")
            first = failed[0][len("FAILED "):] if failed else ""
            results.append((kernel, idx + 1, verdict, first))
            print(f"{kernel} {name}:{idx + 1}: {verdict} (build {build_s:.0f}s, tests {test_s:.0f}s) {first}",
                  flush=True)
    finally:
        open(path, "w").write(original)
        ok, _ = build()
        print(f"restored {name}; rebuild", "ok" if ok else "FAILED")
    bad = [r for r in results if r[2] != "killed"]
    print(f"{len(results) - len(bad)} of {len(results)} barrier deletions killed by the tests")
    return 1 if bad or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
