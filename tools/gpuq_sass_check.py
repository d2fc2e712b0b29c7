"""Registers, spills and SASS instructions per weight value of the gpuq kernels (csrc/gpuq),
compiled for sm_90 without a GPU: the units setup.py builds (build_tools/gpuq_codegen.py) with
its nvcc flags and -Xptxas -v, and the cuobjdump that Triton's package carries.

    python tools/gpuq_sass_check.py                   # every format
    python tools/gpuq_sass_check.py Q4_K IQ4_XS       # some
    python tools/gpuq_sass_check.py --small-t Q4_K    # the small-T kernels only, both K loops
    python tools/gpuq_sass_check.py --wide Q4_K       # the 16-/32-token kernels, plain vs smem_act
    python tools/gpuq_sass_check.py --wide -DGPUQ_MIN_BLOCKS_SMEM_ACT=3 Q4_K   # with a knob

--small-t compiles only the 8-token kernels (bf16, exact path; gate/up and down) with the plain
and the pipelined K loop (gpuq_kernel.h), a few seconds a format instead of a unit's minutes, and
prints a markdown table: registers and spills of each, the gate/up loop's instructions per value.
--wide does the same for the 16- and 32-token kernels (NT = 2 and 4; bf16, the scaled path;
gate/up and down) with the plain and the smem_act K loop: registers, spilled bytes and static
shared memory per block. -D arguments go to nvcc (the kernels' compile-time knobs).

For each format it prints every kernel's registers and spill bytes, the instructions of the decode
kernel per value (straight-line code: one thread, one 32-value chunk), and for the exact-path
gate/up kernel at 8 tokens per warp (the small-T kernel: bf16, SwiGLU, NT=1) the instructions of
its K loop per weight value a lane decodes, with the loop's most frequent instructions. The
loop's values come from its HMMA count: per 32-value chunk the kernel issues 2 HMMA for each of
its 2 weight row groups, plus 2 for the activation sums where the format needs them.

Then the tile-decode GEMM's unit (tiled_<NAME>: gpuq_tiled_kernel.h): every kernel's registers
and spills, and for the gate/up kernel at 128-row tiles (bf16) its K loop (its steps of 32
values counted by their HMMA, 32 a warp a step): the instructions a thread issues per
weight value it decodes (16 a step: the block's 256 threads over its 128 rows x 32 values;
gpuq's unit of cost), each value serving 128 tokens, and that per 32 tokens (x 32 / 128).
"""
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from build_tools import gpuq_codegen  # noqa: E402

# Formats whose bf16 exact path needs no activation sums (signed codes, no min: csrc/gpuq).
NO_SUMS = {"Q8_0", "IQ4_NL", "IQ4_XS"}
# <F, BF16=true, NT=1, SWIGLU=true, Q8=false, LOOP=plain>: the small-T kernel users run
SMALL_T_KERNEL = "Lb1ELi1ELb1ELb0ELi0E"
LOOPS = {"plain": "Li0E", "pipelined": "Li1E"}  # qmm_kernel's last template argument (KLoop)
WIDE_LOOPS = {"plain": "Li0", "smem_act": "Li2"}
DECODE_KERNEL = "Lb1ELb1E"  # decode_kernel<F, BF16=true, VEC=true>
TILED_KERNEL = "Lb1ELb1ELi128E"  # tiled_qmm_kernel<F, BF16=true, SWIGLU=true, BM=128>
TILED_HMMA_PER_STEP, TILED_VALUES_PER_THREAD, TILED_BM = 32, 16, 128  # per 32-value step
# ptxas -v's entry names of the two GEMM kernel templates; group 1: the template arguments
QMM_ENTRY = r"entry function '_ZN4gpuq\d+cuda_target10qmm_kernelINS0_\d+Fmt\w+?E(\w+?)EEEvNS_"
TILED_ENTRY = (r"entry function '_ZN4gpuq\d+cuda_target16tiled_qmm_kernel"
               r"INS0_\d+Fmt\w+?E(\w+?)EEvNS_")


def cuobjdump():
    found = glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "triton",
                                   "backends", "nvidia", "bin", "cuobjdump"))
    return found[0] if found else "cuobjdump"


def loop_histogram(sass_lines):
    """(instruction count, Counter of opcodes) of the largest backward-branch loop."""
    instr = []
    for line in sass_lines:
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            instr.append((int(m.group(1), 16), m.group(2).strip()))
    best = (0, collections.Counter())
    for addr, text in instr:
        t = re.search(r"BRA\s.*?0x([0-9a-f]+)", text)
        if t and int(t.group(1), 16) < addr:
            body = [x for a, x in instr if int(t.group(1), 16) <= a <= addr]
            ops = collections.Counter(
                (x.split()[1] if x.startswith("@") else x.split()[0]).split(".")[0] for x in body)
            if len(body) > best[0]:
                best = (len(body), ops)
    return best


NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
# setup.py's nvcc flags for the CUDA units (--fmad=false included), for sm_90.
NVCC_FLAGS = ["-std=c++17", "-O3", "--fmad=false", "-lineinfo",
              "-gencode=arch=compute_90,code=sm_90"]


def compile_unit(name, source, work, flags=()):
    """(object path, ptxas -v output) of `source`, or None where nvcc failed."""
    obj = os.path.join(work, f"{name}.o")
    res = subprocess.run(
        [NVCC, *NVCC_FLAGS, *flags, "-Xptxas", "-v", f"-I{work}", f"-I{gpuq_codegen.CSRC}", "-c",
         source, "-o", obj],
        capture_output=True, text=True)
    if res.returncode:
        print(f"{name}: nvcc failed\n{res.stderr[-2000:]}")
        return None
    return obj, res.stderr


def kernel_registers(ptxas_log, entry=QMM_ENTRY):
    """[[template arguments, registers, spill bytes, static shared bytes]] of the kernels whose
    ptxas -v entry line matches `entry` (gpuq's GEMMs by default)."""
    kernels, current = [], None
    for line in ptxas_log.splitlines():  # ptxas -v: name, then spills, then registers
        m = re.search(entry, line)
        if m:
            current = [m.group(1), 0, 0, 0]
        elif current and "spill stores" in line:
            current[2] = int(re.search(r"(\d+) bytes spill stores", line).group(1))
        elif current and "Used" in line:
            current[1] = int(re.search(r"Used (\d+) registers", line).group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            current[3] = int(smem.group(1)) if smem else 0
            kernels.append(current)
            current = None
    return kernels


def loop_cost(name, body):
    """(loop instructions, values per lane, Counter) of the gate/up kernel's K loop in `body`:
    the values from its HMMA count (per 32-value chunk 2 for each of its 2 weight row groups,
    plus 2 for the activation sums where the format needs them)."""
    n, ops = loop_histogram(body.splitlines())
    per_chunk = 4 + (0 if name in NO_SUMS else 2)
    return n, ops["HMMA"] // per_chunk * 2 * 16, ops


def registers_line(kernels):
    return ", ".join(f"{k}: {r}" + (f" (spills {sp} B)" if sp else "") for k, r, sp, _ in kernels)


def sass_functions(obj):
    sass = subprocess.run([cuobjdump(), "-sass", obj], capture_output=True, text=True).stdout
    return re.split(r"\n\s*Function : ", sass)


def check(name, units, work, flags=()):
    built = compile_unit(name, units[name], work, flags)
    if built is None:
        return False
    obj, log = built
    regs = registers_line(kernel_registers(log))
    func = sass_functions(obj)
    body = next((f for f in func if SMALL_T_KERNEL in f.split("\n", 1)[0]), "")
    n, values, ops = loop_cost(name, body)
    print(f"{name:7s} small-T loop: {n} instructions, {values} values per lane: "
          f"{n / max(values, 1):.2f} per value; {dict(ops.most_common(8))}")
    print(f"        {regs}")
    decode = next((f for f in func if "decode_kernel" in f.split("\n", 1)[0]
                   and DECODE_KERNEL in f.split("\n", 1)[0]), "")
    instr = [line for line in decode.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/", line)]
    ops = collections.Counter(re.sub(r"^\s*/\*\w+\*/\s*(@!?U?P\w+\s+)?", "", x).split()[0]
                              .split(".")[0] for x in instr)
    print(f"        decode to bf16 (one thread: 32 values, 16-byte stores): {len(instr)} "
          f"instructions, "
          f"{len(instr) / 32:.1f} per value; {dict(ops.most_common(6))}")
    return check_tiled(name, units, work)


def check_tiled(name, units, work):
    built = compile_unit(f"tiled_{name}", units[f"tiled_{name}"], work)
    if built is None:
        return False
    obj, log = built
    kernels = kernel_registers(log, TILED_ENTRY)
    body = next((f for f in sass_functions(obj) if TILED_KERNEL in f.split("\n", 1)[0]), "")
    n, ops = loop_histogram(body.splitlines())
    steps = max(ops["HMMA"] // TILED_HMMA_PER_STEP, 1)
    per_value = n / (steps * TILED_VALUES_PER_THREAD)
    print(f"        tile-decode gate/up loop (BM={TILED_BM}, {steps} steps of 32 values): {n} "
          f"instructions a thread, {per_value:.2f} per value it decodes, "
          f"{per_value * 32 / TILED_BM:.2f} per value per 32 tokens; "
          f"{dict(ops.most_common(8))}")
    print(f"        tiled: {registers_line(kernels)}")
    return True


SMALL_T_UNIT = """#include "gpuq/gpuq_kernel.h"
namespace gpuq {{
inline namespace GPUQ_TARGET {{
template __global__ void qmm_kernel<Fmt{name}, true, 1, true, false, kLoopPlain>(const GemmParams);
template __global__ void qmm_kernel<Fmt{name}, true, 1, true, false, kLoopPipelined>(
    const GemmParams);
template __global__ void qmm_kernel<Fmt{name}, true, 1, false, false, kLoopPlain>(const GemmParams);
template __global__ void qmm_kernel<Fmt{name}, true, 1, false, false, kLoopPipelined>(
    const GemmParams);
}}
}}
"""

# The 16- and 32-token kernels (bf16: the scaled path), gate/up and down, plain and smem_act.
WIDE_UNIT = """#include "gpuq/gpuq_kernel.h"
namespace gpuq {{
inline namespace GPUQ_TARGET {{
#define GQ_WIDE(NT, SWIGLU, LOOP) \\
  template __global__ void qmm_kernel<Fmt{name}, true, NT, SWIGLU, false, LOOP>(const GemmParams);
GQ_WIDE(2, true, kLoopPlain) GQ_WIDE(2, true, kLoopSmemAct)
GQ_WIDE(2, false, kLoopPlain) GQ_WIDE(2, false, kLoopSmemAct)
GQ_WIDE(4, true, kLoopPlain) GQ_WIDE(4, true, kLoopSmemAct)
GQ_WIDE(4, false, kLoopPlain) GQ_WIDE(4, false, kLoopSmemAct)
}}
}}
"""


def small_t(names, work, flags=()):
    """The small-T kernels of `names`, both K loops: one markdown row per format and loop."""
    gpuq_codegen.generate(work, targets=())  # gpuq_tables.inc
    print("| format | loop | gate/up regs (spill B) | down regs (spill B) | loop instr | "
          "instr / value | most frequent |")
    print("|---|---|---:|---:|---:|---:|---|")
    ok = True
    for name in names:
        source = os.path.join(work, f"small_t_{name}.cu")
        with open(source, "w") as f:
            f.write(SMALL_T_UNIT.format(name=name))
        built = compile_unit(f"small_t_{name}", source, work, flags)
        if built is None:
            ok = False
            continue
        obj, log = built
        regs = {args: (r, sp) for args, r, sp, _ in kernel_registers(log)}
        sass = subprocess.run([cuobjdump(), "-sass", obj], capture_output=True, text=True).stdout
        func = re.split(r"\n\s*Function : ", sass)
        for loop, tag in LOOPS.items():
            def cell(swiglu):
                key = next(k for k in regs if k.endswith(f"Li1ELb{swiglu}ELb0E{tag[:-1]}"))
                r, sp = regs[key]
                return f"{r} ({sp})"
            body = next(f for f in func
                        if f"Li1ELb1ELb0E{tag}" in f.split("\n", 1)[0] and "qmm" in
                        f.split("\n", 1)[0])
            n, values, ops = loop_cost(name, body)
            top = ", ".join(f"{k} {v}" for k, v in ops.most_common(5))
            print(f"| {name} | {loop} | {cell(1)} | {cell(0)} | {n} | "
                  f"{n / max(values, 1):.2f} | {top} |")
    return ok


def wide(names, work, flags):
    """The 16- and 32-token kernels of `names`: one markdown row per format, NT and loop."""
    gpuq_codegen.generate(work, targets=())  # gpuq_tables.inc
    print("| format | NT | loop | gate/up regs (spill B) | down regs (spill B) | smem B |")
    print("|---|---:|---|---:|---:|---:|")
    ok = True
    for name in names:
        source = os.path.join(work, f"wide_{name}.cu")
        with open(source, "w") as f:
            f.write(WIDE_UNIT.format(name=name))
        built = compile_unit(f"wide_{name}", source, work, flags)
        if built is None:
            ok = False
            continue
        regs = {args: (r, sp, sm) for args, r, sp, sm in kernel_registers(built[1])}
        for nt in (2, 4):
            for loop, tag in WIDE_LOOPS.items():
                def kernel(swiglu):
                    return regs[next(k for k in regs
                                     if k.endswith(f"Li{nt}ELb{swiglu}ELb0E{tag}"))]
                gu, dn = kernel(1), kernel(0)
                print(f"| {name} | {nt} | {loop} | {gu[0]} ({gu[1]}) | {dn[0]} ({dn[1]}) | "
                      f"{gu[2]} |")
    return ok


def main(argv):
    quick, wide_only = "--small-t" in argv, "--wide" in argv
    flags = [a for a in argv if a.startswith("-D")]
    argv = [a for a in argv if a not in ("--small-t", "--wide") and not a.startswith("-D")]
    names = argv or gpuq_codegen.formats()
    with tempfile.TemporaryDirectory() as work:
        if wide_only:
            return 0 if wide(names, work, flags) else 1
        if quick:
            return 0 if small_t(names, work, flags) else 1
        units = {}
        for p in gpuq_codegen.generate(work, targets=("cuda",)):
            base = os.path.basename(p)[:-len(".cu")]
            if base.startswith("fmt_"):
                units[base[len("fmt_"):]] = p
            elif base.startswith("tiled_"):
                units[base] = p
        ok = all([check(n, units, work, flags) for n in names])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
