"""For the benchmark and the tests (not public API): the CUDA plan's tuning knobs by name, in the
lab build only (ARGON_PLAN_LAB=1 when building: torch.ops.argon_cuda; what each knob does:
PlanChoice in csrc/cuda/plan_cuda.cu), and the kernels a call launches (which plan kernel ran)."""
import contextlib

import torch

KNOBS = ("pdl", "grid", "grid_replicas", "grid_chunks", "grid_cluster")
# grid_cluster: 0 automatic, 1 one segment, 2-16 clusters of that many segments (sm_90+; above
# 8 only where the device runs such clusters: grid_device()["big_clusters"]), and this value the
# grid shape (one segment per block, cooperative launch; kGridShape in csrc/cuda/plan_cuda.cu).
GRID_SHAPE = 17
LAB_BUILD_HINT = ("the CUDA plan's knobs need the lab build: "
                  "ARGON_PLAN_LAB=1 python setup.py build_ext --inplace")


def lab_build():
    """Whether this build has the plan's knobs (torch.ops.argon_cuda, CUDA builds made with
    ARGON_PLAN_LAB=1)."""
    try:
        return hasattr(torch.ops.argon_cuda, "plan_tuning")
    except (AttributeError, RuntimeError):
        return False


def grid_device():
    """What the CUDA plan's launcher found on the current device (lab build): the blocks it holds
    at once under cooperative launch, whether it runs clusters of up to 8 blocks (0 / 1), how many
    clusters of 16 it holds at once (0: none), the dynamic shared memory a block of the grid
    kernel may have (bytes), and the most blocks of the cluster shape (any chunk count, the least
    shared memory it asks for) that one SM holds at once."""
    if not lab_build():
        raise RuntimeError(LAB_BUILD_HINT)
    keys = ("resident_blocks", "clusters", "big_clusters", "smem_room", "cluster_blocks_per_sm")
    return dict(zip(keys, torch.ops.argon_cuda.plan_grid_device()))


def set_plan_knobs(**knobs):
    """Sets the named knobs (the others keep their values); returns every knob's previous
    value, by name, so that set_plan_knobs(**previous) restores them."""
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"unknown plan knobs {sorted(unknown)}; known: {KNOBS}")
    if not lab_build():
        raise RuntimeError(LAB_BUILD_HINT)
    previous = torch.ops.argon_cuda.plan_tuning([knobs.get(k, -1) for k in KNOBS])
    return dict(zip(KNOBS, previous))


@contextlib.contextmanager
def plan_knobs(**knobs):
    """The named knobs set for the block, then every knob restored."""
    previous = set_plan_knobs(**knobs)
    try:
        yield
    finally:
        set_plan_knobs(**previous)


def kernels_launched(fn):
    """The names of the CUDA kernels (and copies) one call of fn launches (profiler, eager)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
