"""torch_argon/testing/<module>.py of THIS checkout, loaded by path, for the A/B scripts whose
sys.path puts another tree's torch_argon first: both sides then use the same routings and timers,
whatever the tree under test has. The testing modules import torch only."""
import importlib.util
import os


def this_checkout(module):
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "torch_argon", "testing", f"{module}.py")
    spec = importlib.util.spec_from_file_location(f"argon_ab_{module}", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
