// Planted error (a built-in input of a type Metal does not allow): tools/metal_check must reject this file.
// check: lint
// expect: \[\[thread_position_in_threadgroup\]\] must be uint/ushort
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], int tid [[thread_position_in_threadgroup]]) {
  out[tid] = 1;
}
