// Planted error (a lambda): tools/metal_check must reject this file.
// check: lint
// expect: lambda
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  auto twice = [](int x) { return 2 * x; };
  out[tid] = twice(int(tid));
}
