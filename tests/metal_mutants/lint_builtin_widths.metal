// Planted error (uint2 threadgroup position with a scalar thread position (issue 33 item 2)): tools/metal_check must reject this file.
// check: lint
// expect: position/size inputs of different widths
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint2 tg [[threadgroup_position_in_grid]],
              uint tid [[thread_position_in_threadgroup]]) {
  out[tg.x * 256 + tid] = 1;
}
