// Planted error (a static local that is neither threadgroup nor constant): tools/metal_check must reject this file.
// check: lint
// expect: static local counter
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  static int counter = 0;
  out[tid] = counter;
}
