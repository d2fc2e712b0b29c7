// moe_mm.metal compiled for the host, and its adapters.
#include "kernel_table.h"
#include "moe_mm.metal"

namespace argon_host {
namespace {
using P = ArgonMoeMmParams;
const KernelRegistrar simd("moe_mm_simd", true, [](const Bindings& b, const LanePosition& l) {
  moe_mm_simd(b.buf(0), b.buf(1), b.buf(2), b.buf(3), b.param<P>(4), uint2(l.tgid[0], l.tgid[1]),
              l.flat, l.simd_group);
});
const KernelRegistrar rows("moe_mm_rows", false, [](const Bindings& b, const LanePosition& l) {
  moe_mm_rows(b.buf(0), b.buf(1), b.buf(2), b.buf(3), b.param<P>(4), uint2(l.tgid[0], l.tgid[1]),
              l.tid[0]);
});
}  // namespace
}  // namespace argon_host
