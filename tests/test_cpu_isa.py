"""The CPU experts kernels' ISA variants (csrc/cpu/cpu_isa.h): which run here, the choice at
first use (TORCH_ARGON_CPU_ISA), its errors, and the dense moe_mm on every variant (below
avx512 bf16 / fp16 experts are widened to fp32 sgemm; from avx512 on torch's oneDNN GEMM runs
them where torch has one). The q8 kernels per variant: tests/test_qmm_q8_cpu.py."""
import os
import subprocess
import sys

import pytest
import torch

import torch_argon
from cpu_isa_cases import ISAS, isa  # noqa: F401 (the fixture)
from routing_cases import make_ids, make_weights
from torch_argon import reference

REL_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def test_variants_here_and_the_choice():
    here = torch.ops.argon_cpu.isas()
    assert here[0] == "portable" and set(here) <= set(ISAS)
    assert "amx" not in here  # no AMX kernels in this build
    assert torch.ops.argon_cpu.isa() in here


@pytest.mark.parametrize("name,match", [
    ("sse9", 'set_isa must be one of portable, avx2, avx512, amx, got "sse9"'),
    ("amx", 'asks for the CPU variant "amx", which this build of torch_argon has no kernels for'),
])
def test_set_isa_refuses_what_cannot_run(name, match):
    before = torch.ops.argon_cpu.isa()
    with pytest.raises(ValueError, match=match):
        torch.ops.argon_cpu.set_isa(name)
    assert torch.ops.argon_cpu.isa() == before


def run_with_env(value, code):
    env = dict(os.environ, TORCH_ARGON_CPU_ISA=value)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)


def test_environment_variable_forces_a_variant():
    done = run_with_env("portable", "import torch, torch_argon; print(torch.ops.argon_cpu.isa())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "portable"


def test_environment_variable_naming_a_missing_variant_raises_a_value_error():
    code = ("import torch, torch_argon\n"
            "try:\n    torch.ops.argon_cpu.isa()\nexcept ValueError as e:\n    print(e)\n")
    done = run_with_env("amx", code)
    assert done.returncode == 0, done.stderr
    assert "TORCH_ARGON_CPU_ISA asks for the CPU variant \"amx\"" in done.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dense_moe_mm_on_every_variant(isa, dtype):
    """moe_mm's route depends on the variant (widened sgemm below avx512); each is held to the
    reference, with -1 ids and NaN-filled outputs."""
    T, K, E, tm, N, Kd = 60, 4, 8, 1, 48, 96
    g = torch.Generator().manual_seed(3)
    plan = reference.moe_plan(make_ids(T, K, E, "neg_some"), make_weights(T, K), E, tm)
    xs = reference.moe_gather(torch.randn(T, Kd, generator=g).to(dtype), plan.sorted_token)
    w = (torch.randn(E, N, Kd, generator=g) * Kd ** -0.5).to(dtype)
    out = torch.full((xs.shape[0], N), float("nan"), dtype=dtype)
    got = torch_argon.moe_mm(xs, w, plan, out=out)
    want = reference.moe_mm(xs, w, plan.tile_expert, tm)
    err = float((got.double() - want.double()).norm() / want.double().norm())
    assert err < REL_TOL[dtype], f"{isa} {dtype}: {err:.3g}"
