"""Builds torch_argon._C.

Always: the op schemas, the CPU kernels, and the Metal-on-host runtime (the .metal kernels
compiled as C++20 and run on host threads). On macOS: the Objective-C++ MPS dispatch, and a
.metallib when `xcrun metal` exists. Where torch has CUDA and nvcc is found: the CUDA kernels.
"""
import glob
import os
import platform
import re
import shutil
import subprocess

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
    srcs += sources("cuda/*.cu", "cuda/*.cpp")
    defines.append(("ARGON_WITH_CUDA", "1"))
    arch = os.environ.get("ARGON_CUDA_ARCH")  # e.g. "90" for the H200
    if arch:
        nvcc_flags += [f"-gencode=arch=compute_{arch},code=sm_{arch}"]

# ---- Metal for MPS (owned by the Metal backend): the kernels as one embedded source, which
# csrc/metal/mps compiles on first use, and a prebuilt argon.metallib when `xcrun metal` exists.
METAL_DIR = os.path.join("torch_argon", "metal")
METAL_KERNELS = ("plan.metal", "gather.metal", "combine.metal", "swiglu.metal", "moe_mm.metal",
                 "dequantize.metal", "moe_qmm.metal")
GENERATED = os.path.join("build", "argon_generated")


def flatten_metal(path, seen):
    """The file with its local #include "..." inlined (each header once, #pragma once dropped)."""
    out = []
    for line in open(path):
        m = re.match(r'\s*#include "([^"]+)"', line)
        if m:
            for d in (os.path.dirname(path), METAL_DIR, CSRC):
                found = os.path.join(d, m.group(1))
                if os.path.exists(found):
                    break
            else:
                raise FileNotFoundError(f"{path}: cannot find {m.group(1)}")
            if found not in seen:
                seen.add(found)
                out.append(flatten_metal(found, seen))
        elif line.strip() != "#pragma once":
            out.append(line)
    return "".join(out)


def write_metal_source():
    seen = set()
    src = "".join(flatten_metal(os.path.join(METAL_DIR, k), seen) for k in METAL_KERNELS)
    os.makedirs(GENERATED, exist_ok=True)
    with open(os.path.join(GENERATED, "metal_source.inc"), "w") as f:
        for i in range(0, len(src), 8000):  # adjacent raw literals: no compiler length limits
            f.write('R"argon_src(' + src[i:i + 8000] + ')argon_src"\n')


def build_metallib():
    """torch_argon/metal/argon.metallib via xcrun, or None (the embedded source is the fallback)."""
    lib = os.path.join(METAL_DIR, "argon.metallib")
    if shutil.which("xcrun") is None:
        return None
    try:
        airs = []
        for k in METAL_KERNELS:
            air = os.path.join(GENERATED, k.replace(".metal", ".air"))
            subprocess.run(["xcrun", "-sdk", "macosx", "metal", "-c", "-fno-fast-math",
                            "-I", METAL_DIR, "-I", CSRC, os.path.join(METAL_DIR, k), "-o", air],
                           check=True)
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
    write_metal_source()
    print("argon: built", build_metallib() or "no metallib")

ext = Extension(
    name="torch_argon._C",
    sources=srcs,
    include_dirs=[os.path.join(ROOT, CSRC), os.path.join(ROOT, "torch_argon", "metal"),
                  # <metal_stdlib> for the .metal files compiled as C++ (the host shim)
                  os.path.join(ROOT, CSRC, "metal", "host", "shim"),
                  # metal_source.inc for the MPS dispatch (macOS only)
                  os.path.join(ROOT, "build", "argon_generated")],
    define_macros=defines,
    extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    extra_link_args=extra_link,
)

setup(
    name="torch_argon",
    version="0.1.0",
    description="Fast Mixture-of-Experts prefill ops for PyTorch on MPS, CUDA and the CPU",
    packages=find_packages(include=["torch_argon", "torch_argon.*"]),
    package_data={"torch_argon": ["metal/*.metal", "metal/*.h", "metal/*.metallib"]},
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    python_requires=">=3.10",
    extras_require={"transformers": ["transformers>=5.0"]},
)
