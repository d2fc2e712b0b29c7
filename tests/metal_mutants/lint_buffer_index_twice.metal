// Planted error (two buffers at one index): tools/metal_check must reject this file.
// check: lint
// expect: \[\[buffer\(1\)\]\] already used by a
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* a [[buffer(1)]], device int* b [[buffer(1)]]) {
  a[0] = b[0];
}
