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
sys.path.insert(0, os.path.join(ROOT, "tools"))
import metal_codegen  # noqa: E402

NVCC = os.environ.get("NVCC") or shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="no nvcc: the metal_cuda units are not compiled")
CSRC = os.path.join(ROOT, "torch_argon", "csrc")
# setup.py's nvcc flags for these units, and torch's own (which turn off __half's conversions)
FLAGS = ["-std=c++17", "-arch=sm_90", "--fmad=false", "-diag-suppress=1098,326", "-Werror=all-warnings",
         *cpp_extension.COMMON_NVCC_FLAGS,
         "-I", CSRC, "-I", metal_codegen.METAL_DIR, "-I", os.path.join(CSRC, "metal", "host", "shim")]
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
                                         [metal_codegen.METAL_DIR]):
        assert f".entry argon_metal__{k.name}(" in ptx, f"no kernel entry for {k.name}"


def test_unit_and_runtime_compile_with_launchers(generated):
    out, _ = generated
    nvcc(["-I", str(out), "-c", os.path.join(out, "cuda_kernels", "plan.cu"),
          "-o", os.path.join(out, "plan.o")], out)
    for f in ("kernel_table.cpp", "cuda_encoder.cpp"):
        nvcc(["-x", "cu", "-c", os.path.join(CSRC, "metal", "cuda", f),
              "-o", os.path.join(out, f + ".o")], out)
