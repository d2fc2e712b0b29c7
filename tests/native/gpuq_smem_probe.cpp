// The host emulation's shared-memory primitives (csrc/gpuq/gpuq_smem.h) run by one 32-lane warp
// of the gpuq fiber runtime, printing what each lane got; tests/test_gpuq_tiled.py compares it
// with the layouts the PTX ISA documents.
//   ldmatrix <rows>   a shared tile of 32 rows x 8 uint16 (value 8 r + c); lane l points at tile
//                     row rows[l] (a permutation); prints, per lane, its 4 registers as 8 values
//   cp_async          lane l copies 16 bytes of a global array (chunk l) into shared memory,
//                     odd lanes as a zero fill; prints the shared array after the wait
//   misaligned        lane 0 gives ldmatrix an address 8 bytes off: prints the launch's error
#include <cstdio>
#include <cstring>
#include <string>

#include "gpuq/gpuq_smem.h"

using namespace gpuq;

static std::string run_ldmatrix(const int rows[32], int offset) {
  static uint16_t tile[32 * 8 + 8] __attribute__((aligned(16)));
  for (int i = 0; i < 32 * 8; ++i) tile[i] = static_cast<uint16_t>(i);
  uint32_t got[32][4];
  const std::string err = host::launch(1, 1, 32, [&] {
    const int lane = lane_id();
    const uint8_t* row = reinterpret_cast<const uint8_t*>(&tile[8 * rows[lane]]);
    ldmatrix_x4(got[lane], row + (lane == 0 ? offset : 0));
  });
  if (!err.empty()) return err;
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) std::printf("%u %u ", got[l][i] & 0xFFFF, got[l][i] >> 16);
    std::printf("\n");
  }
  return "";
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "ldmatrix" || what == "misaligned") {
    int rows[32];
    for (int l = 0; l < 32; ++l) rows[l] = argc > 2 + l ? std::atoi(argv[2 + l]) : l;
    const std::string err = run_ldmatrix(rows, what == "misaligned" ? 8 : 0);
    if (!err.empty()) std::printf("error: %s\n", err.c_str());
    return 0;
  }
  if (what == "cp_async") {
    static uint8_t global[32 * 16] __attribute__((aligned(16)));
    static uint8_t shared[32 * 16] __attribute__((aligned(16)));
    for (int i = 0; i < 32 * 16; ++i) global[i] = static_cast<uint8_t>(i * 7 + 1);
    std::memset(shared, 0xAB, sizeof shared);
    const std::string err = host::launch(1, 1, 32, [&] {
      const int lane = lane_id();
      cp_async_16(shared + 16 * lane, global + 16 * lane, lane % 2 == 0);
      cp_async_commit();
      cp_async_wait_all();
      block_sync();
    });
    if (!err.empty()) std::printf("error: %s\n", err.c_str());
    for (int i = 0; i < 32 * 16; ++i) std::printf("%u ", shared[i]);
    std::printf("\n");
    return 0;
  }
  std::printf("usage: gpuq_smem_probe ldmatrix [rows...] | cp_async | misaligned\n");
  return 2;
}
