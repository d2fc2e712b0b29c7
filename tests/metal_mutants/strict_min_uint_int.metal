// Planted error (min(uint, int): ambiguous in Metal): tools/metal_check must reject this file.
// check: strict
// expect: call to 'min' is ambiguous
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  out[tid] = int(min(tid, 7));
}
