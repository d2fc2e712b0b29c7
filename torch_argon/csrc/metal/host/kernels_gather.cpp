// gather.metal compiled for the host, and its adapters.
#include "kernel_table.h"
#include "gather.metal"

namespace argon_host {
namespace {
using P = ArgonGatherParams;
#define ARGON_GATHER(name)                                                              \
  const KernelRegistrar reg_##name(#name, false, [](const Bindings& b, const LanePosition& l) { \
    name(b.buf(0), b.buf(1), b.buf(2), b.param<P>(3), uint2(l.tgid[0], l.tgid[1]), l.tid[0]); \
  });
ARGON_GATHER(mm_gather_h)
ARGON_GATHER(mm_gather_f)
ARGON_GATHER(mm_gather_any)
}  // namespace
}  // namespace argon_host
