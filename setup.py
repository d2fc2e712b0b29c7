"""Builds torch_argon._C.

Always: the op schemas, the CPU kernels, and the Metal-on-host runtime (the .metal kernels
compiled as C++20 and run on host threads). On macOS: the Objective-C++ MPS dispatch, and a
.metallib when `xcrun metal` exists. Where torch has CUDA and nvcc is found: the CUDA kernels.
"""
import glob
import os
import platform

from setuptools import setup
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
# -fno-trapping-math: lets GCC vectorise branch-free clamps (we never read FP exception flags).
cxx_flags = ["-O3", "-ffp-contract=off", "-fno-trapping-math", "-fvisibility=hidden"]
nvcc_flags = ["-O3", "--fmad=false", "-lineinfo"]
if platform.system() == "Linux":
    # at::parallel_for is inline OpenMP in torch's headers: without -fopenmp it runs serially.
    cxx_flags.append("-fopenmp")
    extra_link.append("-fopenmp")
srcs = sources("*.cpp", "cpu/*.cpp", "metal_host/*.cpp")
Extension = cpp_extension.CppExtension

if want_cuda():
    Extension = cpp_extension.CUDAExtension
    srcs += sources("cuda/*.cu", "cuda/*.cpp")
    defines.append(("ARGON_WITH_CUDA", "1"))
    arch = os.environ.get("ARGON_CUDA_ARCH")  # e.g. "90" for the H200
    if arch:
        nvcc_flags += [f"-gencode=arch=compute_{arch},code=sm_{arch}"]

if want_mps():
    srcs += sources("mps/*.mm")
    defines.append(("ARGON_WITH_MPS", "1"))
    cxx_flags += ["-fobjc-arc"]
    extra_link += ["-framework", "Metal", "-framework", "Foundation"]

ext = Extension(
    name="torch_argon._C",
    sources=srcs,
    include_dirs=[os.path.join(ROOT, CSRC), os.path.join(ROOT, "torch_argon", "metal"),
                  # <metal_stdlib> for the .metal files compiled as C++ (the host shim)
                  os.path.join(ROOT, CSRC, "metal_host", "shim")],
    define_macros=defines,
    extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    extra_link_args=extra_link,
)

setup(
    name="torch_argon",
    version="0.1.0",
    description="Fast Mixture-of-Experts prefill ops for PyTorch on MPS, CUDA and the CPU",
    packages=["torch_argon", "torch_argon.integrations"],
    package_data={"torch_argon": ["metal/*.metal", "metal/*.h", "metal/*.metallib"]},
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    python_requires=">=3.10",
    extras_require={"transformers": ["transformers>=5.0"]},
)
