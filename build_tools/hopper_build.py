"""The Hopper grouped GEMM's units (torch_argon/csrc/hopper/*.cu), compiled by nvcc for sm_90a
into objects that torch_argon._C links, where the build can have them.

Why apart from the extension's own nvcc step: these units need flags no other CUDA file of the
library takes (the sm_90a target alone: wgmma and setmaxnreg exist only there; CUTLASS's include
directories; --expt-relaxed-constexpr), and setuptools gives one flag set per extension.

Where they are built: a CUDA build (setup.py decides that) whose targets include sm_90
(ARGON_CUDA_ARCH, else TORCH_CUDA_ARCH_LIST, else torch's default for the machine: the visible
GPUs' architectures, or every architecture where none is visible) and where CUTLASS 3's headers
are found: ARGON_CUTLASS_DIR (a CUTLASS checkout or the `cutlass_library/source` folder of the
nvidia-cutlass wheel: include/ and tools/util/include/ under it), else the installed
`nvidia-cutlass` package (`pip install --no-deps nvidia-cutlass==4.2.0.0`: only its headers are
used). ARGON_HOPPER=0 leaves the unit out. Elsewhere nothing of it is compiled and
torch_argon.hopper.refusal says why (`status()` here gives the same words at build time).
"""
import contextlib
import glob
import importlib.util
import os
import shutil
import subprocess

UNIT_DIR = os.path.join("torch_argon", "csrc", "hopper")
OBJ_DIR = os.path.join("build", "argon_hopper")
CUTLASS_VERSION = "4.2.0.0"  # the nvidia-cutlass wheel the unit was written and checked against
NVCC_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "-lineinfo", "--expt-relaxed-constexpr",
              "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC")
# More flags for the units whose file name starts with a key: the gate/up GEMM with the
# activation in its epilogue computes swiglu's fp32 expression (csrc/shared/activation.h
# argon_gated) and must contract it exactly as the swiglu kernel does, which setup.py compiles
# with --fmad=false (no multiply-add fused into an fma); its mainloop (wgmma) has no float
# multiply-add for the flag to change.
UNIT_FLAGS = {"hopper_padded_act_": ("--fmad=false",)}
# Headers outside csrc/hopper that units include (a change recompiles them).
SHARED_HEADERS = (os.path.join("torch_argon", "csrc", "shared", "activation.h"),
                  os.path.join("torch_argon", "csrc", "shared", "swiglu_params.h"),
                  os.path.join("torch_argon", "csrc", "shared", "portable.h"),
                  os.path.join("torch_argon", "csrc", "shared", "argon_params.h"),
                  os.path.join("torch_argon", "csrc", "cuda", "cuda_math.cuh"))


def unit_flags(src):
    """The flags of UNIT_FLAGS that unit `src` (a path) takes."""
    name = os.path.basename(src)
    return tuple(f for prefix, flags in UNIT_FLAGS.items() if name.startswith(prefix)
                 for f in flags)


def cutlass_root():
    """The folder holding CUTLASS's include/ (and tools/util/include/), or None."""
    given = os.environ.get("ARGON_CUTLASS_DIR")
    if given:
        return given if os.path.isfile(os.path.join(given, "include", "cutlass", "cutlass.h")) \
            else None
    spec = importlib.util.find_spec("cutlass_library")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    root = os.path.join(list(spec.submodule_search_locations)[0], "source")
    return root if os.path.isfile(os.path.join(root, "include", "cutlass", "cutlass.h")) else None


def include_dirs(root, csrc):
    return [os.path.join(root, "include"), os.path.join(root, "tools", "util", "include"), csrc]


def wants_sm90():
    """Whether the build's CUDA targets include sm_90 (see the module's docstring)."""
    arch = os.environ.get("ARGON_CUDA_ARCH")
    if arch:
        return arch.startswith("90")
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch_list:
        return "9.0" in arch_list
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count():
        return any(torch.cuda.get_device_capability(i) == (9, 0)
                   for i in range(torch.cuda.device_count()))
    return True


def status(cuda: bool) -> str:
    """"" where the unit is built, else why not (the words the build prints)."""
    if os.environ.get("ARGON_HOPPER") == "0":
        return "ARGON_HOPPER=0 left the Hopper unit out"
    if not cuda:
        return "not a CUDA build"
    if not wants_sm90():
        return "the build's CUDA targets have no sm_90 (ARGON_CUDA_ARCH / TORCH_CUDA_ARCH_LIST)"
    if cutlass_root() is None:
        return (f"CUTLASS's headers were not found (pip install --no-deps "
                f"nvidia-cutlass=={CUTLASS_VERSION}, or ARGON_CUTLASS_DIR)")
    if nvcc() is None:
        return "nvcc was not found"
    return ""


def nvcc():
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    path = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    return path if path and os.path.exists(path) else None


def units(root_dir):
    return sorted(glob.glob(os.path.join(root_dir, UNIT_DIR, "*.cu")))


def compile_commands(root_dir, out_dir, extra=()):
    """[(object, command)] of every unit; extra: more nvcc flags (the build check's)."""
    root = cutlass_root()
    incs = [f"-I{d}" for d in include_dirs(root, os.path.join(root_dir, "torch_argon", "csrc"))]
    cmds = []
    for src in units(root_dir):
        obj = os.path.join(out_dir, os.path.basename(src).replace(".cu", ".o"))
        cmds.append((obj, [nvcc(), *NVCC_FLAGS, *unit_flags(src), *extra, *incs, "-c", src,
                           "-o", obj]))
    return cmds


def stale(obj, inputs):
    return not os.path.exists(obj) or os.path.getmtime(obj) < max(map(os.path.getmtime, inputs))


def run_parallel(commands, jobs):
    """Runs the commands, at most `jobs` at a time; raises on the first failure with its
    output."""
    pending, running = list(commands), []
    while pending or running:
        while pending and len(running) < jobs:
            cmd = pending.pop(0)
            running.append((cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True)))
        cmd, proc = running.pop(0)
        output = proc.communicate()[0]
        print(output, end="")
        if proc.returncode:
            for _, other in running:
                other.kill()
            raise RuntimeError(f"nvcc failed ({proc.returncode}): {' '.join(cmd)}\n{output}")


def build(root_dir, cuda: bool, logged=None):
    """(objects, why_not): the unit's objects, compiled where stale, or ([], the reason it is
    not built). logged: build_log.logged, where the compilers' output goes to the build log."""
    why = status(cuda)
    if why:
        return [], why
    out_dir = os.path.join(root_dir, OBJ_DIR)
    os.makedirs(out_dir, exist_ok=True)
    headers = glob.glob(os.path.join(root_dir, UNIT_DIR, "*.h*")) + [
        os.path.join(root_dir, h) for h in SHARED_HEADERS]
    version = os.path.join(cutlass_root(), "include", "cutlass", "version.h")
    # this file too: it holds the units' flags (UNIT_FLAGS), and an object built under other
    # flags (e.g. before --fmad=false) must not be kept
    todo = [cmd for obj, cmd in compile_commands(root_dir, out_dir)
            if stale(obj, [cmd[-3], version, os.path.abspath(__file__), *headers])]
    jobs = max(1, int(os.environ.get("MAX_JOBS", "0")) or os.cpu_count() or 1)
    if todo:
        with logged(f"the Hopper grouped GEMM ({len(todo)} nvcc units)") if logged else \
                contextlib.nullcontext():
            run_parallel(todo, jobs)
    return [obj for obj, _ in compile_commands(root_dir, out_dir)], ""
