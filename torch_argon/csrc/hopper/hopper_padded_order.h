// The order in which the padded Hopper GEMM's tile scheduler (hopper_padded_scheduler.cuh) walks
// its works: output tiles (m, n) of the used 128-row tiles m (consecutive m: one expert's tiles,
// then the next expert's) and the N tiles n.
//
// Why this order: at E = 512 the GEMMs stream their weights (each expert's B is read by every
// M tile of that expert). With the N-fastest order (work w -> m = w / tiles_n) the padded
// gate/up GEMM read 3.68 GB from DRAM where the ptr-array kernel read 2.57 (ncu, H100, K=10
// H=2048 I=512 T=8192; bench/hopper_gemm_notes.md); the hypothesis (not yet measured) is that
// an expert's M tiles, tiles_n works apart, drift out of step over a long K and read B twice.
// Here the works go window by window of kOrderWindow M tiles, M fastest inside a window: the M
// tiles that share a B tile n are adjacent works (except an expert whose tiles straddle two
// windows), taken by neighbouring CTAs at the same time, and each M tile's A rows are read by
// its tiles_n works within kOrderWindow * tiles_n consecutive works.
//
// Limits: work < used * tiles_n, used >= 1, tiles_n >= 1 (the scheduler's checks); the last
// window holds the used tiles left (fewer than kOrderWindow where used is not a multiple).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ARGON_PADDED_HD __host__ __device__
#else
#define ARGON_PADDED_HD
#endif

namespace argon_hopper_padded {

constexpr int32_t kOrderWindow = 4;  // M tiles a window

struct TileMN {
  int32_t m;
  int32_t n;
};

ARGON_PADDED_HD inline TileMN work_tile(uint64_t work, int32_t used, int32_t tiles_n) {
  const uint64_t per_window = static_cast<uint64_t>(kOrderWindow) * static_cast<uint64_t>(tiles_n);
  const uint64_t window = work / per_window;
  const int32_t r = static_cast<int32_t>(work - window * per_window);
  const int32_t m0 = static_cast<int32_t>(window) * kOrderWindow;
  const int32_t rows = used - m0 < kOrderWindow ? used - m0 : kOrderWindow;
  return {m0 + r % rows, r / rows};
}

}  // namespace argon_hopper_padded
