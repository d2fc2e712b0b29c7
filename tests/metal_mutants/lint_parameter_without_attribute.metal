// Planted error (a kernel parameter without an attribute): tools/metal_check must reject this file.
// check: lint
// expect: parameter n: expected exactly one \[\[attribute\]\], found 0
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]], uint n) {
  out[0] = int(n);
}
