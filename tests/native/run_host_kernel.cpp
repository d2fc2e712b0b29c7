// Runs one dequantize kernel of the host runner on one Q8_0 block (scale 1.0, quants 0..31) and
// prints the 32 values: tests/test_metal_cuda_build.py links it with the host and the CUDA unit
// of dequantize.metal in either order, and requires the host kernel's values both ways.
#include <cstdio>
#include <cstring>

#include "metal/host/kernel_table.h"
#include "metal/host/lane_runner.h"
#include "shared/quant_params.h"

int main() {
  unsigned char block[34] = {0x00, 0x3c};  // fp16 1.0, then the int8 quants
  for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<unsigned char>(i);
  float out[32] = {};
  const ArgonDequantParams p{1, 32, 34, 1};
  argon_host::Bindings b;
  b.ptrs[0] = block;
  b.ptrs[1] = out;
  std::memcpy(b.bytes[2], &p, sizeof p);
  b.ptrs[2] = b.bytes[2];
  const argon_host::KernelEntry& k = argon_host::find_kernel("dequantize_q8_0");
  argon_host::run_dispatch("dequantize_q8_0", {1, 1, 1}, {ARGON_DQ_THREADS, 1, 1},
                           k.synchronising, [&](const argon_host::LanePosition& l) { k.fn(b, l); });
  for (float v : out) std::printf("%g ", v);
  std::printf("\n");
  return 0;
}
