"""The metal_cuda backend's CUDA units, compile-only (CI has nvcc but no GPU): every .metal file
through the CUDA prelude with its generated __global__ wrappers, to PTX (the device side), and
one unit with its launchers as a full object (the host side of the generated code is the same
for every unit). Skipped, saying so, where nvcc is absent. The parity suite runs these kernels as
backend "metal_cuda" on a GPU (bench/h200_metal_cuda.sh)."""
import os
import shutil
import subprocess
import sys

import pytest
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from build_tools import metal_codegen  # noqa: E402

NVCC = os.environ.get("NVCC") or shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="no nvcc: the metal_cuda units are not compiled")
CSRC = os.path.join(ROOT, "torch_argon", "csrc")
# setup.py's nvcc flags for these units, and torch's own (which turn off __half's conversions)
FLAGS = ["-std=c++17", "-arch=sm_90", "--fmad=false", "-diag-suppress=1098,326", "-Werror=all-warnings",
         *cpp_extension.COMMON_NVCC_FLAGS,
         "-I", CSRC, "-I", metal_codegen.METAL_DIR, "-I", os.path.join(CSRC, "metal", "host", "shim")]
# (csrc: the shared definitions, "shared/..."; torch_argon/metal: the .metal files)
STEMS = [os.path.splitext(os.path.basename(p))[0]
         for p in metal_codegen.library_files() + list(metal_codegen.CUDA_ONLY)]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("argon_generated")
    units = metal_codegen.generate(str(out), cuda=True)
    return out, [u for u in units if u.endswith(".cu")]


def nvcc(args, out_dir):
    p = subprocess.run([NVCC, *FLAGS, *args], capture_output=True, text=True, cwd=out_dir)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("stem", STEMS)
def test_unit_compiles_to_ptx(generated, stem):
    out, units = generated
    unit = os.path.join(out, "cuda_kernels", stem + ".cu")
    assert unit in units
    nvcc(["-I", str(out), "--ptx", unit, "-o", os.path.join(out, stem + ".ptx")], out)
    ptx = open(os.path.join(out, stem + ".ptx")).read()
    for k in metal_codegen.mk.parse_file(os.path.join(metal_codegen.METAL_DIR, stem + ".metal")
                                         if stem != "sanitizer_selftest" else metal_codegen.CUDA_ONLY[0],
                                         list(metal_codegen.INCLUDE_DIRS)):
        assert f".entry argon_metal__{k.name}(" in ptx, f"no kernel entry for {k.name}"


def test_unit_and_runtime_compile_with_launchers(generated):
    out, _ = generated
    nvcc(["-I", str(out), "-c", os.path.join(out, "cuda_kernels", "plan.cu"),
          "-o", os.path.join(out, "plan.o")], out)
    for f in ("kernel_table.cpp", "cuda_encoder.cpp"):
        nvcc(["-x", "cu", "-c", os.path.join(CSRC, "metal", "cuda", f),
              "-o", os.path.join(out, f + ".o")], out)


def test_cuda_units_leave_the_host_kernels_alone(generated, tmp_path):
    """The host and CUDA units of one .metal file linked into one binary, the CUDA unit first:
    the host runner must still run the host kernel. nvcc's host pass defines every __device__
    function as a stub that calls exit(1); were the .metal code's symbols shared between the
    units (external linkage), the linker could keep the stub for the host's calls, and a
    metal_host test would end its process with status 1 and no message (seen on the H200)."""
    out, _ = generated
    gxx = shutil.which(os.environ.get("CXX", "g++"))
    homes = (os.environ.get("CUDA_HOME"), cpp_extension.CUDA_HOME, "/usr/local/cuda",
             os.path.join(os.path.dirname(os.path.realpath(NVCC)), ".."))
    cudart = next((p for h in homes if h for p in [os.path.join(h, "lib64", "libcudart_static.a")]
                   if os.path.exists(p)), None)
    if gxx is None or cudart is None:
        pytest.skip("needs g++ and the CUDA toolkit's libcudart_static.a")
    includes = ["-I", CSRC, "-I", metal_codegen.METAL_DIR,
                "-I", os.path.join(CSRC, "metal", "host", "shim"), "-I", str(out)]
    # setup.py's host flags (hidden visibility included: it does not keep the stubs out)
    cxx = [gxx, "-std=c++20", "-O3", "-ffp-contract=off", "-fvisibility=hidden", "-fPIC",
           *includes]
    objects = {}
    for name, src in (("main", os.path.join(ROOT, "tests", "native", "run_host_kernel.cpp")),
                      ("lane_runner", os.path.join(CSRC, "metal", "host", "lane_runner.cpp")),
                      ("host_table", os.path.join(CSRC, "metal", "host", "kernel_table.cpp")),
                      ("host_unit", os.path.join(out, "host_kernels", "dequantize.cpp"))):
        objects[name] = str(tmp_path / f"{name}.o")
        p = subprocess.run([*cxx, "-c", src, "-o", objects[name]], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    objects["cuda_unit"] = str(tmp_path / "cuda_unit.o")
    objects["cuda_table"] = str(tmp_path / "cuda_table.o")
    nvcc(["-I", str(out), "-Xcompiler", "-fPIC", "-c",
          os.path.join(out, "cuda_kernels", "dequantize.cu"), "-o", objects["cuda_unit"]], out)
    nvcc(["-x", "cu", "-Xcompiler", "-fPIC", "-c",
          os.path.join(CSRC, "metal", "cuda", "kernel_table.cpp"), "-o", objects["cuda_table"]], out)
    want = " ".join(str(i) for i in range(32))
    for order in (("cuda_unit", "host_unit"), ("host_unit", "cuda_unit")):
        exe = str(tmp_path / f"{order[0]}_first")
        link = [objects[n] for n in ("main", "lane_runner", "host_table", *order, "cuda_table")]
        p = subprocess.run([gxx, *link, cudart, "-ldl", "-lpthread", "-lrt", "-o", exe],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        run = subprocess.run([exe], capture_output=True, text=True)
        assert run.returncode == 0 and run.stdout.split() == want.split(), (
            f"{order[0]} linked first: exit status {run.returncode}, output {run.stdout!r}")


SHARED_UNDER_NVCC = r"""
// The shared headers as csrc/cuda's kernels include them (ARGON_FN's CUDA default:
// __host__ __device__), used from a kernel.
#include "shared/activation.h"
#include "shared/plan_params.h"
#include "shared/quant_blocks.h"

struct M {
  static __host__ __device__ float expf(float x) { return ::expf(x); }
  static __host__ __device__ float erff(float x) { return ::erff(x); }
  static __host__ __device__ float tanhf(float x) { return ::tanhf(x); }
};

__global__ void use(const argon_u8* q, float* out, argon_u32 act) {
  float v[ARGON_QUANT_CHUNK];
  argon_quant::dequant_q4_k(reinterpret_cast<const argon_quant::block_q4_k*>(q), 1, v);
  out[threadIdx.x] = argon_activation<M>(v[threadIdx.x % ARGON_QUANT_CHUNK], act);
}
"""


def test_shared_headers_compile_for_the_cuda_kernels(tmp_path):
    unit = tmp_path / "shared_under_nvcc.cu"
    unit.write_text(SHARED_UNDER_NVCC)
    nvcc(["-c", str(unit), "-o", str(tmp_path / "shared_under_nvcc.o")], tmp_path)
