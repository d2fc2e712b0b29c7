"""Builds torch_argon._C, and with ARGON_TEST_BUILD=1 (scripts/test.sh, CI) torch_argon._C_test.

_C, what a user's install builds: the op schemas, the CPU kernels; on macOS the Objective-C++
MPS dispatch with the Metal kernels (a .metallib when `xcrun metal` exists); where torch has CUDA
and nvcc is found, the CUDA kernels.
_C_test, the test executors (never installed by `pip install .` or scripts/main.sh): the
Metal-on-host runtime (the .metal kernels compiled as C++20 and run on host threads: backend
metal_host) and, in CUDA builds, the metal_cuda backend (the .metal kernels compiled by nvcc).
The compilers' output goes to build/argon_build.log (build_tools/build_log.py).
"""
import glob
import os
import platform
import re
import shutil
import subprocess
import sys

from setuptools import find_packages, setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)  # build_tools/ beside this file (a PEP 517 build may not put it first)
from build_tools import build_log, gpuq_codegen, hopper_build, metal_codegen  # noqa: E402

CSRC = os.path.join("torch_argon", "csrc")
TEST_BUILD = os.environ.get("ARGON_TEST_BUILD") == "1"


def sources(*patterns):
    found = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join(CSRC, pattern)))
    return found


def write_if_changed(path, text):
    """Writes only new content: an unchanged file keeps its mtime, so nothing rebuilds."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def want_cuda():
    if os.environ.get("ARGON_NO_CUDA") == "1":
        return False
    import torch

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def want_mps():
    return platform.system() == "Darwin" and os.environ.get("ARGON_NO_MPS") != "1"


defines = []
extra_link = []
# -ffp-contract=off: no fused multiply-add, so the combine is bit-exact with the reference.
# -fno-trapping-math: lets GCC vectorise loops with selects (we never read FP exception flags).
# -std=c++20 explicitly: the .metal files compiled as C++ need it, and torch < 2.13 defaults to C++17.
cxx_flags = ["-std=c++20", "-O3", "-ffp-contract=off", "-fno-trapping-math", "-fvisibility=hidden"]
# -g0: Python's own CFLAGS carry -g, and debug info for torch's templates tripled each unit's
# compile time (autograd_skip.cpp: 69 s of CPU with it, 20 s without) and made a 25 MB library.
# ARGON_DEBUG_INFO=1 keeps it.
if os.environ.get("ARGON_DEBUG_INFO") != "1":
    cxx_flags.append("-g0")
nvcc_flags = ["-O3", "--fmad=false", "-lineinfo"]
if platform.system() == "Linux":
    # at::parallel_for is inline OpenMP in torch's headers: without -fopenmp it runs serially.
    cxx_flags.append("-fopenmp")
    extra_link.append("-fopenmp")
cuda = want_cuda()
if cuda:
    defines.append(("ARGON_WITH_CUDA", "1"))
    arch = os.environ.get("ARGON_CUDA_ARCH")  # e.g. "90" for the H200
    if arch:
        nvcc_flags += [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    if os.environ.get("ARGON_PLAN_LAB") == "1":  # the CUDA plan's knobs, for the bench scripts
        nvcc_flags.append("-DARGON_PLAN_LAB=1")

# ---- Metal (owned by the Metal backend). build_tools/metal_codegen.py reads every kernel
# signature of torch_argon/metal/*.metal and writes, under build/argon_generated/: the host
# runner's adapter units (host_kernels/*.cpp) and the metal_cuda units (cuda_kernels/*.cu) of
# _C_test, the recipe's binding table (kernel_signatures.inc) and the flattened library
# (metal_source.inc: MPS compiles it when no argon.metallib was built; the strict checks compile
# it on Linux). A kernel signature that breaks a rule stops the build here.
METAL_DIR = os.path.join("torch_argon", "metal")
GENERATED = os.path.join("build", "argon_generated")
generated_units = [os.path.relpath(p, ROOT) for p in
                   metal_codegen.generate(os.path.join(ROOT, GENERATED), cuda=cuda and TEST_BUILD)]


# ---- gpuq (torch_argon/csrc/gpuq: the quantized expert GEMMs and decode in CUDA C++).
# build_tools/gpuq_codegen.py writes one unit per GGUF block format (so they compile in
# parallel) and the kernels' tables under build/argon_generated/: the CUDA units go into _C
# (CUDA builds), the same units compiled as C++ (the host emulation) into _C_test.
gpuq_targets = (("cuda",) if cuda else ()) + (("host",) if TEST_BUILD else ())
gpuq_units = [os.path.relpath(p, ROOT)
              for p in gpuq_codegen.generate(os.path.join(ROOT, GENERATED), gpuq_targets)]


# ---- The Hopper grouped GEMM (torch_argon/csrc/hopper: CUTLASS 3, sm_90a). Its .cu units take
# flags of their own, so build_tools/hopper_build.py compiles them into objects that _C links;
# its torch glue (hopper_ops.cpp, always in _C: the schemas) registers the CUDA kernel only with
# ARGON_WITH_HOPPER. Without CUTLASS's headers or an sm_90 target nothing of it is compiled.
hopper_objects, hopper_why = hopper_build.build(ROOT, cuda, logged=build_log.logged)
hopper_macros = [("ARGON_WITH_HOPPER", "1")] if hopper_objects else []
if cuda and hopper_why:
    print(f"argon: no Hopper grouped GEMM ({hopper_why})", file=sys.stderr)


def metal_inputs():
    """The files argon.metallib is made from: every kernel file and the shaders' headers."""
    return list(metal_codegen.library_files()) + sorted(
        glob.glob(os.path.join(METAL_DIR, "*.h")) + glob.glob(os.path.join(CSRC, "shared", "*.h")))


def build_metallib(inputs):
    """torch_argon/metal/argon.metallib via xcrun (kept when newer than every input), or None
    (the embedded source is the fallback)."""
    lib = os.path.join(METAL_DIR, "argon.metallib")
    if shutil.which("xcrun") is None:
        return None
    if os.path.exists(lib) and os.path.getmtime(lib) >= max(map(os.path.getmtime, inputs)):
        return lib
    try:
        airs = []
        for k in metal_codegen.library_files():
            air = os.path.join(GENERATED, os.path.basename(k).replace(".metal", ".air"))
            subprocess.run(["xcrun", "-sdk", "macosx", "metal", "-c", "-fno-fast-math",
                            *[a for d in metal_codegen.INCLUDE_DIRS for a in ("-I", d)], k,
                            "-o", air], check=True)
            airs.append(air)
        subprocess.run(["xcrun", "-sdk", "macosx", "metallib", *airs, "-o", lib], check=True)
        return lib
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"argon: no argon.metallib ({e}); MPS will compile the embedded Metal source",
              file=sys.stderr)
        return None


# _C: the ops (csrc/*.cpp but the test module's own file), the CPU kernels, the CUDA kernels, and
# on macOS the Metal backend (recipe, out ops, MPS dispatch).
lib_srcs = [s for s in sources("*.cpp", "cpu/*.cpp") if not s.endswith("module_test.cpp")]
lib_srcs += sources("gpuq/gpuq_ops.cpp")  # the gpuq ops' schemas (and their CUDA kernels)
lib_srcs += sources("hopper/hopper_ops.cpp")  # the Hopper GEMM's schemas (and its CUDA kernel)
lib_srcs += sources("hopper/hopper_padded_ops.cpp")  # the padded Hopper GEMM's (the same)
lib_srcs += sources("hopper/hopper_mixed_ops.cpp")  # the Q4_K mixed-input Hopper GEMM's (the same)
lib_flags = dict(cxx=list(cxx_flags), nvcc=list(nvcc_flags))
lib_link = list(extra_link)
if cuda:
    lib_srcs += sources("cuda/*.cu") + [u for u in gpuq_units if u.endswith(".cu")]
if want_mps():
    lib_srcs += sources("metal/*.cpp", "metal/mps/*.mm")
    defines.append(("ARGON_WITH_MPS", "1"))
    lib_flags["cxx"] += ["-fobjc-arc"]
    lib_link += ["-framework", "Metal", "-framework", "Foundation"]
    print("argon: built", build_metallib(metal_inputs()) or "no metallib", file=sys.stderr)

# _C_test: the test executors and the op libraries they register (argon_host, argon_metal_cuda):
# the schemas, functional forms and autograd-key kernels of functional.cpp / autograd_skip.cpp
# compiled again with ARGON_TEST_MODULE, the checks, the Metal recipe and out ops, the host runner
# and its adapter units, and in CUDA builds the metal_cuda backend.
test_srcs = sources("module_test.cpp", "checks.cpp", "functional.cpp", "autograd_skip.cpp",
                    "metal/*.cpp", "metal/host/*.cpp")
test_srcs += [u for u in generated_units if u.endswith(".cpp")]
# the gpuq kernels' host emulation: its ops' CPU kernels, the fibers, one unit per format
test_srcs += sources("gpuq/gpuq_ops.cpp", "gpuq/gpuq_host_runtime.cpp")
test_srcs += [u for u in gpuq_units if u.endswith(".cpp")]
test_flags = dict(cxx=list(cxx_flags), nvcc=list(nvcc_flags))
if cuda:
    test_srcs += [u for u in generated_units if u.endswith(".cu")] + sources("metal/cuda/*.cpp")
    # Metal's [[...]] attributes where nvcc expects none, and `inline` in an instantiation
    test_flags["nvcc"] += ["-diag-suppress=1098,326"]

# ---- Unity build: each C++ unit that includes torch's headers spends 20-45 s of CPU parsing
# them, and the units are small, so the ones of one csrc directory (csrc itself, cpu/, metal/
# with metal/host/, cuda/ for its .cpp files) are compiled as ONE translation unit that
# #includes them, generated here from the globs above: a new file joins its directory's unit by
# itself. Units without torch's headers (the .metal kernels compiled as C++, the lane runner),
# .cu and .mm files compile on their own. One translation unit means one anonymous namespace
# per directory: two files of a directory may not define the same internal name (the compiler
# names both files). ARGON_UNITY=0 compiles every file on its own (the same library).
UNITY_DIR = os.path.join("build", "argon_unity")
TORCH_HEADER = re.compile(r'^\s*#\s*include\s*<(torch/|ATen/|c10/|pybind11/|Python\.h)', re.M)
LOCAL_HEADER = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
HEADER_DIRS = (CSRC, METAL_DIR, os.path.join(CSRC, "metal", "host", "shim"))


def includes_torch(path, seen):
    """Whether the file, or a header of this repository it includes, includes torch's headers."""
    if path in seen:
        return False
    seen.add(path)
    with open(path) as f:
        text = f.read()
    if TORCH_HEADER.search(text):
        return True
    for name in LOCAL_HEADER.findall(text):
        for d in (os.path.dirname(path),) + HEADER_DIRS:
            found = os.path.normpath(os.path.join(d, name))
            if os.path.isfile(found):
                if includes_torch(found, seen):
                    return True
                break
    return False


def unity_sources(files, unity_dir):
    groups, alone = {}, []
    for src in files:
        parts = os.path.relpath(src, CSRC).split(os.sep)
        if parts[0] != ".." and src.endswith(".cpp") and includes_torch(src, set()):
            groups.setdefault(parts[0] if len(parts) > 1 else "csrc", []).append(src)
        else:  # generated units (build/), .cu, .mm, and units without torch's headers
            alone.append(src)
    units = []
    # the largest first: ninja starts edges in order, and these are the build's longest
    for group, members in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
        if len(members) == 1:
            alone += members
            continue
        unit = os.path.join(unity_dir, f"{group}.cpp")
        write_if_changed(unit, "// Generated by setup.py (unity build): do not edit.\n" + "".join(
            f'#include "{os.path.join(ROOT, m)}"\n' for m in members))
        units.append(unit)
    return units + alone


# Everything the libraries are built from: setuptools rebuilds one only when a file is newer than
# it (the unity units' own mtimes change only when their member list does).
depends = [f for ext in ("h", "cpp", "cuh", "cu", "mm", "metal", "inc")
           for f in glob.glob(os.path.join("torch_argon", "**", f"*.{ext}"), recursive=True)]
depends += glob.glob(os.path.join(CSRC, "metal", "host", "shim", "*"))
depends += glob.glob(os.path.join(CSRC, "metal", "cuda", "prelude", "*"))
depends.append(os.path.join(GENERATED, "gpuq_tables.inc"))  # the gpuq units include it
depends = sorted(set(depends))
Extension = cpp_extension.CUDAExtension if cuda else cpp_extension.CppExtension


def extension(name, srcs, flags, link, include_dirs, test_module=False, macros=(), objects=()):
    if os.environ.get("ARGON_UNITY", "1") != "0":
        srcs = unity_sources(srcs, os.path.join(UNITY_DIR, name))
    macros = defines + list(macros) + ([("ARGON_TEST_MODULE", "1")] if test_module else [])
    return Extension(name=f"torch_argon.{name}", sources=srcs, depends=depends + list(objects),
                     include_dirs=[os.path.join(ROOT, d) for d in include_dirs],
                     define_macros=macros, extra_compile_args=flags, extra_link_args=link,
                     extra_objects=list(objects))


# csrc for the shared definitions ("shared/...") and each file's neighbours; generated:
# kernel_signatures.inc, metal_source.inc (build_tools/metal_codegen.py)
extensions = [extension("_C", lib_srcs, lib_flags, lib_link, [CSRC, GENERATED],
                        macros=hopper_macros, objects=hopper_objects)]
if TEST_BUILD:
    # + the .metal files and <metal_stdlib> for them (the host shim; under nvcc it forwards to
    # the CUDA prelude of the metal_cuda backend)
    extensions.append(extension(
        "_C_test", test_srcs, test_flags, list(extra_link),
        [CSRC, METAL_DIR, os.path.join(CSRC, "metal", "host", "shim"), GENERATED],
        test_module=True))


class BuildExtension(cpp_extension.BuildExtension):
    """torch's BuildExtension, which relinks a library on every call (it forces the build and
    leaves it to ninja to skip compiling), made a no-op for a library when nothing changed: no
    file it is built from is newer than it and the build's settings (sources, flags, torch,
    compilers and the environment variables that change a build) are those it was built with.
    The compilers' output goes to the build log (build_tools/build_log.py)."""

    def signature(self, ext):
        import json

        import torch

        env = {k: v for k, v in sorted(os.environ.items())
               if k.startswith(("NVCC_", "TORCH_CUDA_", "CUDA_")) or k in (
                   "CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED")}
        return json.dumps(dict(sources=sorted(ext.sources), macros=ext.define_macros,
                               compile=ext.extra_compile_args, link=ext.extra_link_args,
                               include=ext.include_dirs, torch=torch.__version__,
                               torch_path=os.path.dirname(torch.__file__), python=sys.version,
                               env=env), indent=1, sort_keys=True)

    def build_extensions(self):
        if os.path.exists(build_log.LOG):
            os.remove(build_log.LOG)  # this build's output only
        super().build_extensions()

    def build_extension(self, ext):
        path = self.get_ext_fullpath(ext.name)
        name = ext.name.rsplit(".", 1)[1]
        signature_file = os.path.join("build", f"argon_build_signature{name}.json")
        wanted = self.signature(ext)
        try:
            with open(signature_file) as f:
                built_with = f.read()
        except OSError:
            built_with = None
        if (built_with == wanted and os.path.exists(path) and os.path.getmtime(path) >=
                max(os.path.getmtime(f) for f in ext.sources + ext.depends)):
            return
        with build_log.logged(f"{ext.name} ({len(ext.sources)} units)"):
            super().build_extension(ext)
        write_if_changed(signature_file, wanted)


setup(
    name="torch_argon",
    version="0.1.0",
    description="Fast Mixture-of-Experts prefill ops for PyTorch on MPS, CUDA and the CPU",
    packages=find_packages(include=["torch_argon", "torch_argon.*"]),
    package_data={"torch_argon": ["metal/*.metal", "metal/*.h", "metal/*.metallib",
                               "csrc/shared/*.h", "triton_ops/*.json"]},
    ext_modules=extensions,
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.10",
    extras_require={"transformers": ["transformers>=5.0,<6"]},
)
