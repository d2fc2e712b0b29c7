"""Tools for torch_argon's tests, benchmarks and main job (as torch.testing is for torch), not
the API: backends by name (`backends`), the plain-torch baselines the benchmarks race
(`baselines`), timers (`timing`) and the CUDA plan's lab knobs (`plan_tuning`)."""
from . import backends, baselines, timing

__all__ = ["backends", "baselines", "timing"]
