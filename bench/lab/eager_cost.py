"""Where the eager host time of moe_plan goes (issue 4's "within 1.5x of one tiny torch op").

Host wall clock per call, in turns (bench_cuda.host_us_interleaved), of:
  - the tiny op `x.add_(1)` (the bench's baseline) and `x + 1` (a tiny op that allocates);
  - probe ops (a C++ extension built here with load_inline, registered like ours through
    TORCH_LIBRARY, so the same boxed call from Python): one that does nothing; one that
    returns a fresh CUDA tensor; one that returns seven fresh CUDA tensors (the functional
    plan's allocations, at::detail::empty_cuda each, as moe_plan_cuda does); one that returns
    its input seven times (seven outputs, no allocation, no new Python object); one that
    allocates seven tensors and returns nothing (the allocations without their Python objects);
  - torch.ops.argon.moe_plan (the op's functional form: seven allocations) and moe_plan_out,
    and the Python API torch_argon.moe_plan (in eager mode one buffer for the seven outputs,
    csrc/plan_fresh.cpp) with and without out=, at T = 128.
So "seven fresh outputs" splits into the allocator's share and the Python objects' share.

    python3 bench/lab/eager_cost.py            # on a CUDA machine, with torch_argon built
"""
import os
import sys

import torch
from torch.utils.cpp_extension import load_inline

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_argon  # noqa: E402
from bench_cuda import E, K, TM, host_us_interleaved  # noqa: E402
from torch_argon.testing.routing import routing  # noqa: E402

SRC = r"""
#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <torch/library.h>
using at::Tensor;
using Seven = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
static const int64_t kSizes[7] = {512, 513, 28160, 28160, 20480, 1760, 4};
static Tensor fresh(const Tensor& like, int64_t n) {
  return at::detail::empty_cuda({n}, at::kInt, like.device(), std::nullopt);
}
void nothing(const Tensor& x) {}
Tensor one_fresh(const Tensor& x) { return fresh(x, kSizes[2]); }
Seven seven_fresh(const Tensor& x) {
  return {fresh(x, kSizes[0]), fresh(x, kSizes[1]), fresh(x, kSizes[2]), fresh(x, kSizes[3]),
          fresh(x, kSizes[4]), fresh(x, kSizes[5]), fresh(x, kSizes[6])};
}
Seven seven_same(const Tensor& x) { return {x, x, x, x, x, x, x}; }
void seven_fresh_dropped(const Tensor& x) { Seven s = seven_fresh(x); }
TORCH_LIBRARY(eager_probe, m) {
  m.def("nothing(Tensor x) -> ()");
  m.def("one_fresh(Tensor x) -> Tensor");
  m.def("seven_fresh(Tensor x) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("seven_same(Tensor x) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("seven_fresh_dropped(Tensor x) -> ()");
}
TORCH_LIBRARY_IMPL(eager_probe, CUDA, m) {
  m.impl("nothing", TORCH_FN(nothing));
  m.impl("one_fresh", TORCH_FN(one_fresh));
  m.impl("seven_fresh", TORCH_FN(seven_fresh));
  m.impl("seven_same", TORCH_FN(seven_same));
  m.impl("seven_fresh_dropped", TORCH_FN(seven_fresh_dropped));
}
"""


def main():
    load_inline("eager_probe", cpp_sources=[SRC], with_cuda=True, is_python_module=False,
                extra_cflags=["-O2"], verbose=False)
    P = torch.ops.eager_probe
    x = torch.zeros(1, device="cuda")
    ids, w = routing(128, E, K, "uniform", device="cuda")
    plan = torch_argon.argon_ops.moe_plan(ids, w, E, TM)
    outs = plan.tensors()
    plan_op, plan_out_op = torch.ops.argon.moe_plan.default, torch.ops.argon.moe_plan_out.default
    fns = {
        "tiny x.add_(1)": lambda: x.add_(1),
        "tiny x + 1": lambda: x + 1,
        "probe nothing": lambda: P.nothing.default(x),
        "probe one_fresh": lambda: P.one_fresh.default(x),
        "probe seven_same": lambda: P.seven_same.default(x),
        "probe seven_fresh_dropped": lambda: P.seven_fresh_dropped.default(x),
        "probe seven_fresh": lambda: P.seven_fresh.default(x),
        "argon moe_plan_out": lambda: plan_out_op(ids, w, E, TM, *outs),
        "argon moe_plan": lambda: plan_op(ids, w, E, TM),
        "torch_argon.moe_plan out=": lambda: torch_argon.moe_plan(ids, w, E, TM, out=plan),
        "torch_argon.moe_plan": lambda: torch_argon.moe_plan(ids, w, E, TM),
    }
    us = host_us_interleaved(fns, n=2000, trials=11)
    base = us["tiny x.add_(1)"]
    print(f"{'host us per call':28s} {'us':>7s} {'/ tiny':>7s}")
    for name, t in us.items():
        print(f"{name:28s} {t:7.2f} {t / base:7.2f}")


if __name__ == "__main__":
    main()
