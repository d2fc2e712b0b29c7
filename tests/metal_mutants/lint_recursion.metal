// Planted error (a recursive function): tools/metal_check must reject this file.
// check: lint
// expect: recursion: f -> f
#include <metal_stdlib>
using namespace metal;
inline int f(int n) { return n <= 0 ? 0 : 1 + f(n - 1); }
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  out[tid] = f(int(tid));
}
