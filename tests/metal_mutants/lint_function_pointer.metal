// Planted error (a function pointer variable): tools/metal_check must reject this file.
// check: lint
// expect: function pointer fp
#include <metal_stdlib>
using namespace metal;
inline int one() { return 1; }
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  int (*fp)() = one;
  out[tid] = fp();
}
