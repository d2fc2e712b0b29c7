// Planted error (an implicit float4 -> half4 conversion): tools/metal_check must reject this file.
// check: strict
// expect: cannot initialize a variable of type 'const half4'
#include <metal_stdlib>
using namespace metal;
kernel void k(device half4* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  const half4 h = float4(1.0f);
  out[tid] = h;
}
