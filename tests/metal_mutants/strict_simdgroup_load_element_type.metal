// Planted error (simdgroup_load of a float matrix from a half tile): tools/metal_check must reject this file.
// check: strict
// expect: no matching function for call to 'simdgroup_load'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup half t[64];
  t[tid % 64] = half(1.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 m;
  simdgroup_load(m, t, 8);
  simdgroup_store(m, out, 8);
}
