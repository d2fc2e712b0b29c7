// swiglu.metal compiled for the host, and its adapter.
#include "kernel_table.h"
#include "swiglu.metal"

namespace argon_host {
namespace {
const KernelRegistrar swiglu("swiglu_h", false, [](const Bindings& b, const LanePosition& l) {
  swiglu_h(b.buf(0), b.buf(1), b.buf(2), b.param<ArgonSwigluParams>(3),
           uint2(l.tgid[0], l.tgid[1]), l.tid[0]);
});
}  // namespace
}  // namespace argon_host
