"""Triton's interpreter for running the Triton kernels on the CPU (the tests' interpreter runs,
the bench scripts' dry runs): enable() before any kernel is defined, i.e. before torch_argon's
Triton modules are imported (triton.jit reads TRITON_INTERPRET when it wraps a kernel).

Imports nothing of torch_argon, so a script that loads torch_argon without its compiled
extension can use it (bench/h200_gemm_sweep.py --cpu-dry-run)."""
import os

_enabled = False


def enable():
    """TRITON_INTERPRET=1, and the interpreter adapted to NumPy >= 2.4 and spared a redundant
    re-patch on every helper call (see the two functions below). Idempotent."""
    global _enabled
    os.environ["TRITON_INTERPRET"] = "1"
    if _enabled:
        return
    import triton.runtime.interpreter as interpreter
    _index_scalars_numpy2(interpreter)
    _skip_repatching_on_helper_calls(interpreter)
    _enabled = True


def _index_scalars_numpy2(interpreter):
    """The interpreter keeps scalar arguments as 1-element arrays and converts them with int(),
    which NumPy >= 2.4 refuses for arrays of one dimension: take the element instead."""
    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


def _skip_repatching_on_helper_calls(interpreter):
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
