// Planted error (a double (Metal has none)): tools/metal_check must reject this file.
// check: strict
// expect: argon_metal_has_no_double
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  double d = 0.5;
  out[tid] = int(d);
}
