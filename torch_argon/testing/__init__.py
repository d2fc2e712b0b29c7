"""Tools for torch_argon's tests, benchmarks and main job (as torch.testing is for torch), not
the API: backends by name (`backends`), the plain-torch baselines the benchmarks race
(`baselines`), routings (`routing`), timers (`timing`), the synthetic layers the main job and
the bench scripts time (`layers`), GGUF files written for tests and benchmarks (`gguf_files`),
Triton's interpreter for CPU runs of the Triton kernels (`triton_interpreter`) and the CUDA
plan's lab knobs (`plan_tuning`).

Submodules load on first use. `timing`, `routing` and `triton_interpreter` import no other part
of torch_argon, so a script may load them by path, without the package and its compiled
extension (bench/plan_lean_ab.py times another tree's build with them)."""
import importlib

__all__ = ["backends", "baselines", "gguf_files", "layers", "plan_tuning", "routing", "timing",
           "triton_interpreter"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
