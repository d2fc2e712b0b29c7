// Planted error (a buffer in no address space): tools/metal_check must reject this file.
// check: lint
// expect: needs the device or constant address space
#include <metal_stdlib>
using namespace metal;
kernel void k(int* a [[buffer(0)]]) {
  a[0] = 1;
}
