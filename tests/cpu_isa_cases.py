"""The CPU experts kernels' ISA variants (csrc/cpu/cpu_isa.h), for tests that run once per
variant: `isa` sets each in turn (torch.ops.argon_cpu.set_isa) and restores the choice after; a
variant this CPU or build does not run is skipped with that reason."""
import pytest
import torch

ISAS = ("portable", "avx2", "avx512", "amx")


@pytest.fixture(params=ISAS)
def isa(request):
    here = torch.ops.argon_cpu.isas()
    if request.param not in here:
        pytest.skip(f"{request.param}: this CPU or build does not run it (variants here: {here})")
    before = torch.ops.argon_cpu.isa()
    torch.ops.argon_cpu.set_isa(request.param)
    yield request.param
    torch.ops.argon_cpu.set_isa(before)
