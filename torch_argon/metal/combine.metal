// combine (moe_out in the tuning report the project grew from): out[t] = sum over k with pos[t,k] >= 0 of w[t,k] * y[pos[t,k]],
// accumulated in fp32 in ascending k as acc = acc + (w * y) (product and sum kept as separate
// statements and contraction disabled, so no fused multiply-add changes the bits), then
// + shared[t], then + residual[t], rounded once to the output type. Skipped entries (pos -1, or a
// pos outside [0, R) that a valid plan never holds) are not touched at all.
// Launch: grid (T, ceil(H / 256)) threadgroups of 256 threads; one output element per thread.
// Any K; no synchronisation.
#include "argon_common.h"
#include "shared/combine_params.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

kernel void combine(device const uchar* y [[buffer(0)]],
                    device const int* pos [[buffer(1)]],
                    device const uchar* weights [[buffer(2)]],
                    device const uchar* shared_out [[buffer(3)]],
                    device const uchar* residual [[buffer(4)]],
                    device uchar* out [[buffer(5)]],
                    constant ArgonCombineParams& p [[buffer(6)]],
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]]) {
  const uint c = tg.y * ARGON_ELEMWISE_THREADS + tid, t = tg.x;
  if (c >= p.cols) return;
  float acc = 0.0f;
  for (uint k = 0; k < p.top_k; ++k) {
    const ulong entry = ulong(t) * p.top_k + k;
    const int r = pos[entry];
    if (r < 0 || uint(r) >= p.y_rows) continue;
    const float w = load_f(weights, p.w_dtype, entry);
    const float term = w * load_f(y, p.y_dtype, ulong(r) * p.cols + c);
    acc = acc + term;
  }
  const ulong at = ulong(t) * p.cols + c;
  if (p.has_shared != 0) acc = acc + load_f(shared_out, p.shared_dtype, at);
  if (p.has_residual != 0) acc = acc + load_f(residual, p.residual_dtype, at);
  store_f(out, p.out_dtype, at, acc);
}
