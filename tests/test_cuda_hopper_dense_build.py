"""How the Hopper grouped GEMM's units are built (build_tools/hopper_build.py): where setup.py
builds them and the reason it gives where it does not, where CUTLASS's headers are looked for,
and the nvcc command. The CUTLASS units themselves take about 3 minutes to compile on the
2-core build machine, so their compile and SASS check is a tool (tools/hopper_unit_check.py, run by the
coordinator and by bench/h200_hopper.sh), not a test; the C entry unit, which includes no
CUTLASS, compiles here in seconds wherever nvcc is."""
import os
import shutil
import subprocess

import pytest

from build_tools import hopper_build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_cutlass(tmp_path):
    """A folder shaped like CUTLASS's (include/cutlass/cutlass.h)."""
    (tmp_path / "include" / "cutlass").mkdir(parents=True)
    (tmp_path / "include" / "cutlass" / "cutlass.h").write_text("")
    return str(tmp_path)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("ARGON_HOPPER", "ARGON_CUDA_ARCH", "TORCH_CUDA_ARCH_LIST", "ARGON_CUTLASS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_status_gives_the_reason_it_is_not_built(clean_env, tmp_path):
    clean_env.setenv("ARGON_CUTLASS_DIR", fake_cutlass(tmp_path))
    assert hopper_build.status(False) == "not a CUDA build"
    clean_env.setenv("ARGON_CUDA_ARCH", "80")
    assert "no sm_90" in hopper_build.status(True)
    clean_env.setenv("ARGON_HOPPER", "0")
    assert hopper_build.status(True) == "ARGON_HOPPER=0 left the Hopper unit out"


def test_targets_decide_sm90(clean_env):
    clean_env.setenv("ARGON_CUDA_ARCH", "90")
    assert hopper_build.wants_sm90()
    clean_env.setenv("ARGON_CUDA_ARCH", "90a")
    assert hopper_build.wants_sm90()
    clean_env.delenv("ARGON_CUDA_ARCH")
    clean_env.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert hopper_build.wants_sm90()
    clean_env.setenv("TORCH_CUDA_ARCH_LIST", "8.0 8.6")
    assert not hopper_build.wants_sm90()


def test_missing_cutlass_names_the_package(clean_env, tmp_path):
    clean_env.setenv("ARGON_CUDA_ARCH", "90")
    clean_env.setenv("ARGON_CUTLASS_DIR", str(tmp_path))  # no include/cutlass/cutlass.h there
    assert hopper_build.cutlass_root() is None
    why = hopper_build.status(True)
    assert "CUTLASS's headers were not found" in why and "nvidia-cutlass==4.2.0.0" in why
    assert hopper_build.build(ROOT, True) == ([], why)  # nothing compiled


def test_the_installed_wheel_is_found_by_location(clean_env, tmp_path):
    """Without ARGON_CUTLASS_DIR: the nvidia-cutlass package's cutlass_library/source, located
    without importing it."""
    package = tmp_path / "site" / "cutlass_library"
    fake_cutlass(package / "source")
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    clean_env.syspath_prepend(str(tmp_path / "site"))
    assert hopper_build.cutlass_root() == str(package / "source")


def test_nvcc_command_targets_sm90a_with_cutlass_includes(clean_env, tmp_path):
    if hopper_build.nvcc() is None:
        pytest.skip("no nvcc on this machine (the command names it)")
    root = fake_cutlass(tmp_path)
    clean_env.setenv("ARGON_CUTLASS_DIR", root)
    cmds = hopper_build.compile_commands(ROOT, str(tmp_path / "obj"))
    units = sorted(os.path.basename(c[1][-3]) for c in cmds)
    configs = ("cooperative_128x256", "pingpong_128x128", "pingpong_64x128")
    padded = ("cooperative_128x256", "pingpong_128x128")  # the padded-plan GEMM's
    entries = ["hopper_entry.cu", "hopper_padded_entry.cu", "hopper_mixed_entry.cu"]
    assert units == sorted(entries +
                           [f"hopper_gemm_{dtype}_{config}.cu"
                            for dtype in ("bf16", "fp16") for config in configs] +
                           [f"hopper_padded_{dtype}_{config}.cu"
                            for dtype in ("bf16", "fp16") for config in padded] +
                           [f"hopper_padded_act_{dtype}_{config}.cu"  # the fused gate/up GEMM's
                            for dtype in ("bf16", "fp16") for config in padded] +
                           [f"hopper_mixed_{codes}_bf16_cooperative_128x{tile}.cu"
                            for codes in ("u4", "u8") for tile in (128, 64)])  # the
                                              # mixed-input GEMM's code widths and token tiles
    for _, cmd in cmds:
        assert "-gencode=arch=compute_90a,code=sm_90a" in cmd
        assert f"-I{root}/include" in cmd and f"-I{root}/tools/util/include" in cmd
        # the fused activation's units contract floating point as the swiglu kernel does
        fused = os.path.basename(cmd[-3]).startswith("hopper_padded_act_")
        assert ("--fmad=false" in cmd) == fused


def test_the_fused_activation_units_take_the_swiglu_kernels_fmad_flag():
    """setup.py compiles the CUDA swiglu kernel with --fmad=false; the fused epilogue computes
    the same expression (argon_gated) and must take the same flag to give the same bits."""
    with open(os.path.join(ROOT, "setup.py")) as f:
        assert '"--fmad=false"' in f.read()
    assert hopper_build.unit_flags("x/hopper_padded_act_bf16_pingpong_128x128.cu") == (
        "--fmad=false",)
    assert hopper_build.unit_flags("x/hopper_padded_bf16_pingpong_128x128.cu") == ()
    for header in hopper_build.SHARED_HEADERS:  # a change to them recompiles the units
        assert os.path.isfile(os.path.join(ROOT, header)), header


@pytest.mark.parametrize("entry", ["hopper_entry.cu", "hopper_padded_entry.cu",
                                   "hopper_mixed_entry.cu"])
def test_the_entry_unit_compiles_with_nvcc(tmp_path, entry):
    """The C entry points and their headers' structs under nvcc for sm_90a, for the grouped and
    the padded GEMM (the CUTLASS units: tools/hopper_unit_check.py)."""
    nvcc = hopper_build.nvcc() or shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on this machine")
    src = os.path.join(ROOT, hopper_build.UNIT_DIR, entry)
    flags = list(hopper_build.NVCC_FLAGS)
    subprocess.run([nvcc, *flags, f"-I{os.path.join(ROOT, 'torch_argon', 'csrc')}", "-c", src,
                    "-o", str(tmp_path / "entry.o")], check=True, capture_output=True)
    assert (tmp_path / "entry.o").stat().st_size > 0
