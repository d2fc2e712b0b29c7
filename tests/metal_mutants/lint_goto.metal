// Planted error (a goto): tools/metal_check must reject this file.
// check: lint
// expect: goto
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  if (tid == 0) goto done;
  out[tid] = 1;
done:
  return;
}
