// plan.metal compiled for the host, and its adapters (buffer index -> parameter).
#include "kernel_table.h"
#include "plan.metal"

namespace argon_host {
namespace {
using P = ArgonPlanParams;
const KernelRegistrar hist("mm_hist", true, [](const Bindings& b, const LanePosition& l) {
  mm_hist(b.buf(0), b.param<P>(1), b.buf(2), l.tgid[0], l.tid[0]);
});
const KernelRegistrar scan("mm_scan", true, [](const Bindings& b, const LanePosition& l) {
  mm_scan(b.param<P>(0), b.buf(1), b.buf(2), b.buf(3), b.buf(4), b.buf(5), b.buf(6), b.buf(7),
          l.tid[0], l.simd_group, l.simd_lane);
});
const KernelRegistrar place("mm_place", true, [](const Bindings& b, const LanePosition& l) {
  mm_place(b.buf(0), b.buf(1), b.param<P>(2), b.buf(3), b.buf(4), b.buf(5), b.buf(6), b.buf(7),
           l.tgid[0], l.tid[0]);
});
}  // namespace
}  // namespace argon_host
