// Planted error (a virtual function): tools/metal_check must reject this file.
// check: lint
// expect: virtual function area
#include <metal_stdlib>
using namespace metal;
struct Shape { virtual int area() const { return 1; } };
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  Shape s;
  out[tid] = s.area();
}
