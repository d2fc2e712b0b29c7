"""Import first in a Triton-interpreter run (tests/*_interpreter_run.py): puts the tests'
helpers and torch_argon on the path and runs the Triton kernels through the interpreter
(torch_argon.testing.triton_interpreter)."""
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before torch_argon's Triton kernels are defined
TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [TESTS, os.path.dirname(TESTS)]  # the tests' helpers, and torch_argon

from torch_argon.testing.triton_interpreter import enable  # noqa: E402

enable()
