// Planted error (new and delete): tools/metal_check must reject this file.
// check: lint
// expect: new / delete
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint tid [[thread_position_in_threadgroup]]) {
  int* p = new int(3);
  out[tid] = *p;
  delete p;
}
