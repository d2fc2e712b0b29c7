// lane_selftest.metal compiled for the host, and its adapters.
#include "kernel_table.h"
#include "lane_selftest.metal"

namespace argon_host {
namespace {
#define ARGON_SELFTEST(name)                                                                \
  const KernelRegistrar reg_##name(#name, true, [](const Bindings& b, const LanePosition& l) { \
    name(b.buf(0), l.tid[0], l.tg_size[0]);                                                   \
  });
ARGON_SELFTEST(selftest_barrier_ok)
ARGON_SELFTEST(selftest_early_return)
ARGON_SELFTEST(selftest_split_barrier)
ARGON_SELFTEST(selftest_simd_early_return)
}  // namespace
}  // namespace argon_host
