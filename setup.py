"""Builds torch_argon._C.

Always: the op schemas, the CPU kernels, and the Metal-on-host runtime (the .metal kernels
compiled as C++20 and run on host threads). On macOS: the Objective-C++ MPS dispatch, and a
.metallib when `xcrun metal` exists. Where torch has CUDA and nvcc is found: the CUDA kernels,
and the metal_cuda backend (the .metal kernels compiled by nvcc, for testing them as SIMT code).
"""
import glob
import os
import platform
import shutil
import subprocess
import sys

from setuptools import find_packages, setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("torch_argon", "csrc")


def sources(*patterns):
    found = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join(CSRC, pattern)))
    return found


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
nvcc_flags = ["-O3", "--fmad=false", "-lineinfo"]
if platform.system() == "Linux":
    # at::parallel_for is inline OpenMP in torch's headers: without -fopenmp it runs serially.
    cxx_flags.append("-fopenmp")
    extra_link.append("-fopenmp")
srcs = sources("*.cpp", "cpu/*.cpp", "metal/*.cpp", "metal/host/*.cpp")
Extension = cpp_extension.CppExtension

if want_cuda():
    Extension = cpp_extension.CUDAExtension
    srcs += sources("cuda/*.cu")
    defines.append(("ARGON_WITH_CUDA", "1"))
    arch = os.environ.get("ARGON_CUDA_ARCH")  # e.g. "90" for the H200
    if arch:
        nvcc_flags += [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    if os.environ.get("ARGON_PLAN_LAB") == "1":  # the CUDA plan's knobs, for the bench scripts
        nvcc_flags.append("-DARGON_PLAN_LAB=1")

# ---- Metal (owned by the Metal backend). tools/metal_codegen.py reads every kernel signature of
# torch_argon/metal/*.metal and writes, under build/argon_generated/: the host runner's adapter
# units (host_kernels/*.cpp, compiled below on every platform), the recipe's binding table
# (kernel_signatures.inc) and the flattened library (metal_source.inc: MPS compiles it when no
# argon.metallib was built; the strict checks compile it on Linux). A kernel signature that
# breaks a rule stops the build here.
METAL_DIR = os.path.join("torch_argon", "metal")
GENERATED = os.path.join("build", "argon_generated")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import metal_codegen  # noqa: E402

srcs += [os.path.relpath(p, ROOT)
         for p in metal_codegen.generate(os.path.join(ROOT, GENERATED), cuda=want_cuda())]
if want_cuda():
    # the metal_cuda backend: the .metal kernels through the CUDA prelude (its units: above)
    srcs += sources("metal/cuda/*.cpp")
    # Metal's [[...]] attributes where nvcc expects none, and `inline` in an instantiation
    nvcc_flags += ["-diag-suppress=1098,326"]


def build_metallib():
    """torch_argon/metal/argon.metallib via xcrun, or None (the embedded source is the fallback)."""
    lib = os.path.join(METAL_DIR, "argon.metallib")
    if shutil.which("xcrun") is None:
        return None
    try:
        airs = []
        for k in metal_codegen.library_files():
            air = os.path.join(GENERATED, os.path.basename(k).replace(".metal", ".air"))
            subprocess.run(["xcrun", "-sdk", "macosx", "metal", "-c", "-fno-fast-math",
                            "-I", METAL_DIR, k, "-o", air], check=True)
            airs.append(air)
        subprocess.run(["xcrun", "-sdk", "macosx", "metallib", *airs, "-o", lib], check=True)
        return lib
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"argon: no argon.metallib ({e}); MPS will compile the embedded Metal source")
        return None


if want_mps():
    srcs += sources("metal/mps/*.mm")
    defines.append(("ARGON_WITH_MPS", "1"))
    cxx_flags += ["-fobjc-arc"]
    extra_link += ["-framework", "Metal", "-framework", "Foundation"]
    print("argon: built", build_metallib() or "no metallib")

ext = Extension(
    name="torch_argon._C",
    sources=srcs,
    include_dirs=[os.path.join(ROOT, CSRC), os.path.join(ROOT, "torch_argon", "metal"),
                  # <metal_stdlib> for the .metal files compiled as C++ (the host shim; under
                  # nvcc it forwards to the CUDA prelude of the metal_cuda backend)
                  os.path.join(ROOT, CSRC, "metal", "host", "shim"),
                  # generated: kernel_signatures.inc, metal_source.inc (tools/metal_codegen.py)
                  os.path.join(ROOT, GENERATED)],
    define_macros=defines,
    extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    extra_link_args=extra_link,
)

setup(
    name="torch_argon",
    version="0.1.0",
    description="Fast Mixture-of-Experts prefill ops for PyTorch on MPS, CUDA and the CPU",
    packages=find_packages(include=["torch_argon", "torch_argon.*"]),
    package_data={"torch_argon": ["metal/*.metal", "metal/*.h", "metal/*.metallib",
                               "triton_ops/*.json"]},
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    python_requires=">=3.10",
    extras_require={"transformers": ["transformers>=5.0"]},
)
