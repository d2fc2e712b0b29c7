// Planted error (a kernel parameter with two attributes): tools/metal_check must reject this file.
// check: lint
// expect: parameter out: expected exactly one \[\[attribute\]\], found 2
#include <metal_stdlib>
using namespace metal;
kernel void k(device int* out [[buffer(0)]] [[buffer(1)]]) {
  out[0] = 1;
}
