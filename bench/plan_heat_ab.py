"""Does heat() (torch_argon/testing/timing.py, run by bench_cuda.py) change what the plan's timing
reads? One process, the same op and inputs, four ways, alternated three times (CUDA only):
  cold        no matrix products before the timing
  heat        timed right after heat's bf16 products
  heat+sleep  the same after a 0.3 s pause (what bench_cuda.py does now)
  inner100    cold, 100 calls per graph instead of 20
Prints the best and the median of the three per way, in us per call under graph replay.
H200, 2026-11-29: T = 512 cold 6.76, heat 7.56-7.86, heat+sleep 6.76; T = 1024 7.15, 8.30,
7.15 (SM clock 1965 MHz in all). Run from the repository root:
    PYTHONPATH=$PWD python bench/plan_heat_ab.py
"""

import torch

import torch_argon
from bench import bench_cuda as bc
from torch_argon.testing.routing import routing
from torch_argon.testing.timing import cuda_graph_us, heat


def main():
    ops = torch_argon.argon_ops
    for T in (16, 128, 512, 1024, 4096):
        ids, w = routing(T, bc.E, bc.K, "uniform", seed=T, device="cuda")
        out = ops.moe_plan(ids, w, bc.E, bc.TM)
        call = lambda: ops.moe_plan(ids, w, bc.E, bc.TM, out=out)  # noqa: E731
        got = {"cold": [], "heat": [], "heat+sleep": [], "inner100": []}
        for _ in range(3):
            got["cold"].append(cuda_graph_us(call))
            heat(settle_s=0)
            got["heat"].append(cuda_graph_us(call))
            heat(settle_s=0.3)
            got["heat+sleep"].append(cuda_graph_us(call))
            got["inner100"].append(cuda_graph_us(call, inner=100))
        cells = " ".join(f"{k}={min(v):.2f}/{sorted(v)[1]:.2f}" for k, v in got.items())
        print(f"T={T:5d} {cells}  SM clock {bc.sm_clock()} MHz", flush=True)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("plan_heat_ab.py needs a CUDA device")
    main()
