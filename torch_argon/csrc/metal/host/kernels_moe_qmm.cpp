// moe_qmm.metal compiled for the host, and its adapters (one per format).
#include "kernel_table.h"
#include "moe_qmm.metal"

namespace argon_host {
namespace {
#define ARGON_HOST_MOE_QMM(lower, UPPER, id, elems, bytes)                                      \
  const KernelRegistrar moe_qmm_##lower(                                                        \
      "moe_qmm_" #lower, true, [](const Bindings& b, const LanePosition& l) {                   \
        moe_qmm<argon_quant::block_##lower, elems, argon_quant::dequant_##lower>(               \
            b.buf(0), b.buf(1), b.buf(2), b.buf(3), b.param<ArgonMoeQmmParams>(4),              \
            uint2(l.tgid[0], l.tgid[1]), l.flat, l.simd_group);                                 \
      });
ARGON_QUANT_FORMATS(ARGON_HOST_MOE_QMM)
#undef ARGON_HOST_MOE_QMM
}  // namespace
}  // namespace argon_host
