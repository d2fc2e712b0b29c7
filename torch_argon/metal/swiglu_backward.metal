// swiglu_backward: the gradient of swiglu's inputs. With a = act(g) and a' = act'(g)
// (csrc/shared/activation.h), out[r, i] = grad_out[r, i] * u * a' (d gate) and
// out[r, I + i] = grad_out[r, i] * a (d up), in fp32, each rounded once to gate's dtype.
// gate and up are two buffers, or one fused [R, 2I] buffer bound twice with up at p.up_offset.
// Launch: grid (R, ceil(I / 256)) threadgroups of 256 threads, one (d gate, d up) pair per
// thread. Every element depends only on its own inputs: the bytes are the same run to run.
#include "activation.h"
#include "argon_common.h"
#include "shared/swiglu_params.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

kernel void swiglu_backward(device const uchar* grad_out [[buffer(0)]],
                            device const uchar* gate [[buffer(1)]],
                            device const uchar* up [[buffer(2)]],
                            device uchar* out [[buffer(3)]],
                            constant ArgonSwigluBackwardParams& p [[buffer(4)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]]) {
  const uint i = tg.y * ARGON_ELEMWISE_THREADS + tid, r = tg.x;
  if (i >= p.cols) return;
  const ulong in_at = ulong(r) * p.in_stride + i;
  const float dy = load_f(grad_out, p.grad_dtype, ulong(r) * p.cols + i);
  const float u = load_f(up, p.value_dtype, in_at + p.up_offset);
  const ArgonActGrad a =
      argon_activation_grad<ArgonMetalMath>(load_f(gate, p.value_dtype, in_at), p.activation);
  const ulong out_at = ulong(r) * 2 * p.cols + i;
  store_f(out, p.value_dtype, out_at, dy * u * a.slope);
  store_f(out, p.value_dtype, out_at + p.cols, dy * a.value);
}
