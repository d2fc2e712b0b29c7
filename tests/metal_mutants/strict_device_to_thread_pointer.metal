// Planted error (a device pointer bound to a plain (thread) pointer): tools/metal_check must reject this file.
// check: strict
// expect: cannot initialize a variable of type 'int \*'
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  int* q = out;
  q[tid] = 1;
}
