// combine.metal compiled for the host, and its adapter.
#include "kernel_table.h"
#include "combine.metal"

namespace argon_host {
namespace {
const KernelRegistrar combine("mm_combine", false, [](const Bindings& b, const LanePosition& l) {
  mm_combine(b.buf(0), b.buf(1), b.buf(2), b.buf(3), b.buf(4), b.buf(5),
             b.param<ArgonCombineParams>(6), uint2(l.tgid[0], l.tgid[1]), l.tid[0]);
});
}  // namespace
}  // namespace argon_host
