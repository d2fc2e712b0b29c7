// Planted error (more threadgroup memory than an Apple GPU has): tools/metal_check must reject this file.
// check: lint
// expect: kernel k: 36864 bytes of threadgroup memory, over 32 KiB
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float a[4096];
  threadgroup float b[5120];
  a[tid] = 1.0f;
  b[tid] = 2.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = int(a[0] + b[1]);
}
