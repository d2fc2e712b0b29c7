"""The quickstart's editable install (scripts/env.sh): the checkout's .venv imports torch_argon
from any directory, the package and the library built in place being this checkout's."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")

PROBE = """
import torch, torch_argon
ids = torch.tensor([[1, 0], [1, 2]])
plan = torch_argon.moe_plan(ids, torch.ones(2, 2), 3, 1)
print(torch_argon.__file__)
print(torch_argon._C.__file__)
print(plan.counts.tolist())
"""


@pytest.mark.skipif(not VENV_PYTHON.exists(), reason="no .venv in this checkout (made by "
                    "scripts/main.sh or scripts/test.sh)")
def test_venv_imports_the_checkout_from_any_directory(tmp_path):
    got = subprocess.run([str(VENV_PYTHON), "-c", PROBE], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    package, library, counts = got.stdout.strip().splitlines()
    assert Path(package).resolve() == ROOT / "torch_argon" / "__init__.py"
    assert Path(library).resolve().parent == ROOT / "torch_argon"
    assert counts == "[1, 2, 1]"
