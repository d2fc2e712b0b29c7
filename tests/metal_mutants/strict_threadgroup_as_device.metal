// Planted error (a threadgroup array passed where a device pointer is expected): tools/metal_check must reject this file.
// check: strict
// expect: no matching function for call to 'read_one'
#include <metal_stdlib>
using namespace metal;
inline int read_one(device const int* x) { return x[0]; }
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  threadgroup int t[32];
  t[tid] = 1;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = read_one(t);
}
