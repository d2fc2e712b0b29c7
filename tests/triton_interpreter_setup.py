"""Import first in a Triton-interpreter run (tests/*_interpreter_run.py): sets TRITON_INTERPRET
before triton is imported, puts the tests' helpers and torch_argon on the path, and adapts the
interpreter to NumPy >= 2.4."""
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [TESTS, os.path.dirname(TESTS)]  # the tests' helpers, and torch_argon

import triton.runtime.interpreter as interpreter  # noqa: E402


def _index_scalars_numpy2():
    """The interpreter keeps scalar arguments as 1-element arrays and converts them with int(),
    which NumPy >= 2.4 refuses for arrays of one dimension: take the element instead."""
    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


_index_scalars_numpy2()


def _skip_repatching_on_helper_calls():
    """The interpreter patches triton.language again on every call of a @triton.jit helper from
    a kernel (inspect.getmembers over the module, about 5 ms a call), although the kernel's
    launch has patched it for the whole run (and restores it after). The quantized kernels call
    their helpers hundreds of times a program: calls of helpers that see only triton.language
    (the module every launch patches) skip the redundant patch; others (triton's own helpers,
    which use triton.language.core) are patched as before."""
    import triton.language as tl
    original = interpreter.InterpretedFunction.__call__
    only_tl = {}

    def device_call(self, *args, **kwargs):
        key = id(self.fn)
        if key not in only_tl:
            langs = [v for v in self.fn.__globals__.values()
                     if isinstance(v, type(tl)) and v in (tl, tl.core)]
            only_tl[key] = langs == [tl]
        if not only_tl[key]:
            return original(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    interpreter.InterpretedFunction.__call__ = device_call


_skip_repatching_on_helper_calls()
