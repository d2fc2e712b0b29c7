// Planted error (a throw): tools/metal_check must reject this file.
// check: lint
// expect: exception handling
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  if (tid > 1024) throw 1;
  out[tid] = 1;
}
