// dequantize.metal compiled for the host, and its adapters (one per format).
#include "kernel_table.h"
#include "dequantize.metal"

namespace argon_host {
namespace {
#define ARGON_HOST_DEQUANTIZE(lower, UPPER, id, elems, bytes)                                   \
  const KernelRegistrar dequantize_##lower(                                                     \
      "dequantize_" #lower, false, [](const Bindings& b, const LanePosition& l) {               \
        dequantize_blocks<argon_quant::block_##lower, elems, argon_quant::dequant_##lower>(     \
            b.buf(0), b.buf(1), b.param<ArgonDequantParams>(2), l.tgid[0], l.tid[0]);           \
      });
ARGON_QUANT_FORMATS(ARGON_HOST_DEQUANTIZE)
#undef ARGON_HOST_DEQUANTIZE
}  // namespace
}  // namespace argon_host
