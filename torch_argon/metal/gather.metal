// moe_gather: xs[r] = x[sorted_token[r]]; rows whose token is -1 (or outside [0, T), which a
// valid plan never holds) are zero. Three variants, picked by the host:
//   gather_copy16    16-bit source to the same 16-bit type (fp16 or bf16): a raw copy, 4
//                    elements (one 8-byte ushort4) per thread. Needs H % 4 == 0 and 8-byte
//                    aligned buffers.
//   gather_from_f32  fp32 source: float4 loads, converted once (round to nearest even) to the
//                    output type. Needs H % 4 == 0 and 16-byte aligned buffers.
//   gather_any       any source and output type, one element per thread: everything else.
// Launch: grid (R, ceil(H / (4 or 1) / 256)) threadgroups of 256 threads; threadgroup (r, gy)
// handles row r (rows on x: the dimension with the largest limit); the lane is its
// thread_index_in_threadgroup (threadgroups are one-dimensional). No synchronisation.
#include "argon_common.h"
#include "shared/gather_params.h"

inline int gather_token(device const int* sorted_token, uint r, constant ArgonGatherParams& p) {
  const int t = sorted_token[r];
  return (t >= 0 && uint(t) < p.n_tokens) ? t : -1;
}

kernel void gather_copy16(device const ushort4* x [[buffer(0)]],
                          device const int* sorted_token [[buffer(1)]],
                          device ushort4* xs [[buffer(2)]],
                          constant ArgonGatherParams& p [[buffer(3)]],
                          uint2 tg [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]]) {
  const uint c4 = tg.y * ARGON_ELEMWISE_THREADS + tid, cols4 = p.cols / 4, r = tg.x;
  if (c4 >= cols4) return;
  const int t = gather_token(sorted_token, r, p);
  xs[ulong(r) * cols4 + c4] = t < 0 ? ushort4(0) : x[ulong(t) * cols4 + c4];
}

kernel void gather_from_f32(device const float4* x [[buffer(0)]],
                            device const int* sorted_token [[buffer(1)]],
                            device uchar* xs [[buffer(2)]],
                            constant ArgonGatherParams& p [[buffer(3)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]]) {
  const uint c4 = tg.y * ARGON_ELEMWISE_THREADS + tid, cols4 = p.cols / 4, r = tg.x;
  if (c4 >= cols4) return;
  const int t = gather_token(sorted_token, r, p);
  const float4 v = t < 0 ? float4(0.0f) : x[ulong(t) * cols4 + c4];
  const ulong at = ulong(r) * cols4 + c4;
  if (p.dst_dtype == ARGON_F32) {
    ((device float4*)xs)[at] = v;
  } else if (p.dst_dtype == ARGON_F16) {
    ((device half4*)xs)[at] = half4(v);
  } else {
    ((device ushort4*)xs)[at] =
        ushort4(float_to_bf16(v.x), float_to_bf16(v.y), float_to_bf16(v.z), float_to_bf16(v.w));
  }
}

kernel void gather_any(device const uchar* x [[buffer(0)]],
                       device const int* sorted_token [[buffer(1)]],
                       device uchar* xs [[buffer(2)]],
                       constant ArgonGatherParams& p [[buffer(3)]],
                       uint2 tg [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]]) {
  const uint c = tg.y * ARGON_ELEMWISE_THREADS + tid, r = tg.x;
  if (c >= p.cols) return;
  const int t = gather_token(sorted_token, r, p);
  const float v = t < 0 ? 0.0f : load_f(x, p.src_dtype, ulong(t) * p.cols + c);
  store_f(xs, p.dst_dtype, ulong(r) * p.cols + c, v);
}
