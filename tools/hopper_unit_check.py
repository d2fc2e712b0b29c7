"""The Hopper GEMMs' units (torch_argon/csrc/hopper/*.cu: the ptr-array grouped GEMM's and the
padded plan's) compiled for sm_90a with the build's flags (build_tools/hopper_build.py) and
checked in their SASS, without a GPU:

    python tools/hopper_unit_check.py                       # compile into a temporary folder
    python tools/hopper_unit_check.py --objects build/argon_hopper   # check built objects

Needs nvcc and CUTLASS's headers (ARGON_CUTLASS_DIR or the nvidia-cutlass package). For every
kernel of every object it prints registers, stack and local bytes (cuobjdump -res-usage) and
counts in the SASS: HGMMA (wgmma: the tensor-core instruction the kernel must be built on),
LDL / STL (local memory: spills or indexed register arrays), UTMALDG / UTMASTG (TMA loads and
stores). Exit status 1 when a GEMM kernel has no HGMMA or any local memory, or a unit does not
compile. Compiling the grouped GEMM's seven units (one per element type and configuration, and
the entry) took 160 s of wall time with two jobs on the 2-core build machine, the padded GEMM's
five 76 s more (2026-12-06, load ~1.4): too slow for a CI test, so this is a tool the
coordinator runs, and bench/h200_hopper.sh runs it on the device's objects. --only SUBSTRING
compiles the units whose file name holds it (e.g. --only padded, --only mixed: the
mixed-input GEMM, one unit per code width, 77 s each alone on the build machine, 2026-12-06;
--only padded_act: the gate/up GEMM with the activation in its epilogue, four units, 37-40 s
each alone, 2026-12-06; they issue no TMA store: h is stored from registers).
"""
import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from build_tools import hopper_build  # noqa: E402

COUNTED = ("HGMMA", "LDL", "STL", "UTMALDG", "UTMASTG")


def cuobjdump():
    """The CUDA toolkit's cuobjdump, else the one Triton's package carries (nvcc-only
    toolkits, as on the build machine, have none)."""
    beside_nvcc = os.path.join(os.path.dirname(hopper_build.nvcc() or ""), "cuobjdump")
    if shutil.which("cuobjdump") or os.path.exists(beside_nvcc):
        return shutil.which("cuobjdump") or beside_nvcc
    spec = importlib.util.find_spec("triton")  # located, not imported
    if spec and spec.submodule_search_locations:
        bundled = os.path.join(list(spec.submodule_search_locations)[0], "backends", "nvidia",
                               "bin", "cuobjdump")
        if os.path.exists(bundled):
            return bundled
    sys.exit("no cuobjdump found (the CUDA toolkit's or Triton's)")


def sass_counts(obj):
    """{kernel name: {instruction: count}} from cuobjdump -sass."""
    text = subprocess.run([cuobjdump(), "-sass", obj], check=True, capture_output=True,
                          text=True).stdout
    kernels, current = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = kernels.setdefault(m.group(1), {k: 0 for k in COUNTED})
            continue
        if current is not None:
            for k in COUNTED:
                if re.search(rf"\b{k}\b", line):
                    current[k] += 1
    return kernels


def resource_usage(obj):
    """{kernel: {"registers", "stack", "local"}} from cuobjdump -res-usage."""
    text = subprocess.run([cuobjdump(), "-res-usage", obj], check=True, capture_output=True,
                          text=True).stdout
    usage = {}
    for m in re.finditer(r"Function (\S+):\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", text):
        usage[m.group(1)] = dict(registers=int(m.group(2)), stack=int(m.group(3)),
                                 local=int(m.group(4)))
    return usage


def label(kernel):
    """A readable name: the schedule and the wgmma atom of a GEMM kernel, else the setup
    kernel's element type."""
    schedule = re.search(r"Kernel(PtrArray)?TmaWarpSpecialized(Pingpong|Cooperative)", kernel)
    atom = re.search(r"MMA_(\d+x\d+x\d+)_F32(BF16|F16)", kernel)
    if schedule and atom:
        kind = "grouped" if schedule.group(1) else "padded"
        if "MixedInput" in kernel:  # the mixed-input GEMM (RS wgmma: A from registers)
            kind = "mixed u4" if "integer_subbyteILi4E" in kernel else "mixed u8"
        if "GateUpActEpilogue" in kernel:  # the gate/up GEMM with the activation fused
            kind = "padded act"
        return (f"GEMM {kind} {schedule.group(2).lower()} wgmma {atom.group(1)} "
                f"{atom.group(2).lower()}")
    return "setup " + ("bf16" if "bfloat16" in kernel else "fp16")


def compile_units(out_dir, only=""):
    """Compiles every unit whose file name holds `only` (at most MAX_JOBS at a time); returns
    the number of units and the seconds it took."""
    if hopper_build.cutlass_root() is None or hopper_build.nvcc() is None:
        sys.exit("needs nvcc and CUTLASS's headers (ARGON_CUTLASS_DIR or nvidia-cutlass)")
    cmds = [cmd for obj, cmd in hopper_build.compile_commands(ROOT, out_dir)
            if only in os.path.basename(obj)]
    t0 = time.time()
    jobs = max(1, int(os.environ.get("MAX_JOBS", "2")))
    pending, running = list(cmds), []
    while pending or running:
        while pending and len(running) < jobs:
            cmd = pending.pop(0)
            running.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True))
        proc = running.pop(0)
        text = proc.communicate()[0]
        if proc.returncode:
            print(text[-4000:])
            sys.exit(f"nvcc failed ({proc.returncode})")
    return len(cmds), time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", help="a folder of built objects to check instead of compiling")
    p.add_argument("--json", help="also write the findings here")
    p.add_argument("--only", default="", help="compile only the units whose name holds this")
    args = p.parse_args()
    seconds = tmp = None
    if args.objects:
        obj_dir = args.objects
    else:
        tmp = obj_dir = tempfile.mkdtemp(prefix="argon_hopper_")
        n_units, seconds = compile_units(obj_dir, args.only)
        print(f"compiled {n_units} units in {seconds:.0f} s")
    report, bad = {"compile_seconds": seconds, "kernels": {}}, []
    for obj in sorted(glob.glob(os.path.join(obj_dir, "*.o"))):
        usage = resource_usage(obj)
        for kernel, counts in sass_counts(obj).items():
            info = dict(counts, object=os.path.basename(obj), label=label(kernel),
                        **usage.get(kernel, {}))
            report["kernels"][kernel] = info
            gemm = "GemmUniversal" in kernel
            if gemm and (counts["HGMMA"] == 0 or counts["LDL"] or counts["STL"] or
                         info.get("local") or info.get("stack")):
                bad.append(kernel)
            print(f"{info['label']:45s} HGMMA {counts['HGMMA']:3d}  LDL {counts['LDL']}  "
                  f"STL {counts['STL']}  TMA load/store {counts['UTMALDG']}/{counts['UTMASTG']}  "
                  f"regs {info.get('registers', '?')}  stack {info.get('stack', '?')}  "
                  f"local {info.get('local', '?')}")
    n_gemm = sum("GemmUniversal" in k for k in report["kernels"])
    report["gemm_kernels"], report["failing"] = n_gemm, bad
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if not n_gemm:
        print("no GEMM kernel found")
        return 1
    print(f"{n_gemm} GEMM kernels; " + (f"FAILING (no HGMMA or local memory): {bad}" if bad
                                         else "every one issues HGMMA and uses no local memory"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
