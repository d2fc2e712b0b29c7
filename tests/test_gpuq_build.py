"""The gpuq kernels as the CUDA build compiles them (CI has nvcc but no CUDA torch, so the CUDA
extension itself cannot build here): the units setup.py compiles into torch_argon._C
(build_tools/gpuq_codegen.py), with its nvcc flags and torch's, warnings as errors, for sm_80 and
sm_90 (and sm_75, where they only trap: a build for several architectures must not fail); and
the torch glue (csrc/gpuq/gpuq_ops.cpp) as a CUDA build compiles it. Skipped, saying
so, where nvcc is absent. The host emulation of the same units is built into torch_argon._C_test
and run by tests/test_gpuq.py."""
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from torch.utils import cpp_extension

from build_tools import gpuq_codegen

NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
pytestmark = [pytest.mark.cpu_only,
              pytest.mark.skipif(NVCC is None, reason="no nvcc: the gpuq CUDA units are not "
                                                      "compiled")]
# setup.py's nvcc flags (-O3 --fmad=false -lineinfo) and torch's own, warnings as errors
FLAGS = ["-std=c++17", "-O3", "--fmad=false", "-lineinfo", "-Werror=all-warnings",
         *cpp_extension.COMMON_NVCC_FLAGS, "-I", gpuq_codegen.CSRC]
# Through ptxas for both architectures: a format of 32-value groups and one of 16-value groups
# (every mma.sync form the kernels use: bf16, f16, s8 k32 and k16; the tile-decode GEMM's
# ldmatrix and cp.async). The other units to PTX.
ASSEMBLED = ("Q4_K", "Q6_K")
ARCHS = ("80", "90")


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpuq_generated")
    paths = gpuq_codegen.generate(str(out), targets=("cuda",))
    return out, {os.path.splitext(os.path.basename(p))[0]: p for p in paths}


def nvcc(args, cwd):
    p = subprocess.run([NVCC, *FLAGS, *args], capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


def test_every_format_has_a_unit(units):
    _, paths = units
    from torch_argon.gpuq import FORMATS
    assert sorted(paths) == sorted([f"fmt_{n}" for n in FORMATS] + [f"tiled_{n}" for n in FORMATS]
                                   + ["quantize"])


def test_units_compile_for_sm80_and_sm90(units):
    out, paths = units
    jobs = []
    for name, path in paths.items():
        fmt = name.split("_", 1)[-1]  # fmt_<NAME>, tiled_<NAME> (the tile-decode GEMM)
        if fmt in ASSEMBLED:
            jobs += [(name, ["-I", str(out), f"-gencode=arch=compute_{a},code=sm_{a}", "-c", path,
                             "-o", str(out / f"{name}_{a}.o")]) for a in ARCHS]
        else:
            jobs.append((name, ["-I", str(out), "-arch=sm_90", "--ptx", path,
                                "-o", str(out / f"{name}.ptx")]))
    # an older architecture in the build's list (TORCH_CUDA_ARCH_LIST) must not break it
    jobs += [(unit, ["-I", str(out), "-gencode=arch=compute_75,code=sm_75", "-c", paths[unit],
                     "-o", str(out / f"{unit}_75.o")]) for unit in ("fmt_Q4_K", "tiled_Q4_K")]
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda job: (job[0], *nvcc(job[1], out)), jobs))
    failed = [f"{name}:\n{log[-3000:]}" for name, rc, log in results if rc]
    assert not failed, "\n".join(failed)
    for name in paths:
        if name.startswith("fmt_") and name[4:] not in ASSEMBLED:
            ptx = (out / f"{name}.ptx").read_text()
            assert ".entry" in ptx and "qmm_kernel" in ptx and "decode_kernel" in ptx, name
        if name.startswith("tiled_") and name[6:] not in ASSEMBLED:
            ptx = (out / f"{name}.ptx").read_text()
            assert ".entry" in ptx and "tiled_qmm_kernel" in ptx and "ldmatrix" in ptx, name


def test_lab_build_compiles_every_loop(units):
    """The lab build (GPUQ_LAB_LOOPS=1: the plain, the pipelined and the smem_act K loop,
    ARGON_GPUQ_LOOP picks) of a 256-value format and a 32-value one, for sm_80 and sm_90
    through ptxas, warnings as errors: every loop's kernels are in the object."""
    out, paths = units
    jobs = [(fmt, a, ["-I", str(out), "-DGPUQ_LAB_LOOPS=1", "-Xptxas", "-v",
                      f"-gencode=arch=compute_{a},code=sm_{a}", "-c", paths[f"fmt_{fmt}"],
                      "-o", str(out / f"lab_{fmt}_{a}.o")])
            for fmt in ("Q4_K", "Q8_0") for a in ARCHS]
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda job: (job[0], job[1], *nvcc(job[2], out)), jobs))
    failed = [f"{fmt} sm_{a}:\n{log[-3000:]}" for fmt, a, rc, log in results if rc]
    assert not failed, "\n".join(failed)
    for fmt, a, _, log in results:  # ptxas -v names every kernel it compiled
        # the last template argument of qmm_kernel: the KLoop (Li0E plain, Li1E pipelined,
        # Li2E smem_act)
        assert all(f"Lb0ELi{loop}EEEvNS_" in log for loop in range(3)), (fmt, a)


def test_cuda_glue_compiles(tmp_path):
    """gpuq_ops.cpp as _C's CUDA build compiles it (ARGON_WITH_CUDA: the CUDA kernels'
    registration, the stream and the device guard). This machine's CPU torch lacks one generated
    CUDA header, which an empty stand-in replaces."""
    gxx = shutil.which(os.environ.get("CXX", "g++"))
    homes = (os.environ.get("CUDA_HOME"), cpp_extension.CUDA_HOME, "/usr/local/cuda",
             os.path.dirname(os.path.dirname(os.path.realpath(NVCC))))
    cuda_include = next((os.path.join(h, "include") for h in homes if h and os.path.exists(
        os.path.join(h, "include", "cuda_runtime_api.h"))), None)
    if gxx is None or cuda_include is None:
        pytest.skip("needs g++ and the CUDA toolkit's headers")
    stand_in = tmp_path / "c10" / "cuda" / "impl"
    stand_in.mkdir(parents=True)
    (stand_in / "cuda_cmake_macros.h").write_text("#pragma once\n")
    gpuq_codegen.generate(str(tmp_path), targets=())
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    p = subprocess.run([gxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Werror",
                        "-DARGON_WITH_CUDA=1", *includes, f"-I{tmp_path}", f"-I{cuda_include}",
                        f"-I{gpuq_codegen.CSRC}", os.path.join(gpuq_codegen.SRC, "gpuq_ops.cpp")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
