// Planted error (a buffer index Metal does not have): tools/metal_check must reject this file.
// check: lint
// expect: buffer index must be 0..30
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* a [[buffer(31)]]) {
  a[0] = 1;
}
