// swiglu: out[r, i] = act(g) * u, computed in fp32 and rounded once; act is silu (SwiGLU), or
// gelu in its erf or tanh form (GeGLU), by p.activation (csrc/shared/activation.h).
// gate and up are two buffers, or one fused [R, 2I] buffer bound twice with up at p.up_offset.
// Launch: grid (R, ceil(I / 256)) threadgroups of 256 threads, one element per thread.
// (Scalar coalesced threads measured as fast as float4 ones for this kernel on an M5, in the
// tuning report the project grew from.)
#include "activation.h"
#include "argon_common.h"
#include "shared/swiglu_params.h"

kernel void swiglu(device const uchar* gate [[buffer(0)]],
                   device const uchar* up [[buffer(1)]],
                   device uchar* out [[buffer(2)]],
                   constant ArgonSwigluParams& p [[buffer(3)]],
                   uint2 tg [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]]) {
  const uint i = tg.y * ARGON_ELEMWISE_THREADS + tid, r = tg.x;
  if (i >= p.cols) return;
  const ulong in_at = ulong(r) * p.in_stride + i;
  const float g = load_f(gate, p.in_dtype, in_at);
  const float u = load_f(up, p.in_dtype, in_at + p.up_offset);
  store_f(out, p.out_dtype, ulong(r) * p.cols + i, argon_activation<ArgonMetalMath>(g, p.activation) * u);
}
