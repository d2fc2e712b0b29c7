// The order in which the padded Hopper GEMM's tile scheduler (hopper_padded_scheduler.cuh) walks
// its works: output tiles (m, n) of the plan's used tiles m (of 128 rows, or the mixed-input
// GEMM's token tile; consecutive m: one expert's tiles, then the next expert's) and the N
// tiles n.
//
// The works go window by window of `window` M tiles, M fastest inside a window: the M tiles that
// share a B tile n are adjacent works (except an expert whose tiles straddle two windows), taken
// by neighbouring CTAs at the same time, and each M tile's A rows are read by its tiles_n works
// within window * tiles_n consecutive works. A window of 1 is the N-fastest order (work w ->
// m = w / tiles_n).
//
// Why the window depends on the experts' tiles (order_window): a window of 4 keeps one expert's
// M tiles, which share every weight tile, together where each expert has 4 or more; with fewer
// a window spans several experts, all of whose weight tiles are then in flight at once (slower
// where measured: bench/hopper_gemm_notes.md, "The second H100 session").
//
// Limits: work < used * tiles_n, used >= 1, tiles_n >= 1, window >= 1 (the scheduler's checks);
// the last window holds the used tiles left (fewer than window where used is not a multiple).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ARGON_PADDED_HD __host__ __device__
#else
#define ARGON_PADDED_HD
#endif

namespace argon_hopper_padded {

constexpr int32_t kOrderWindow = 4;  // M tiles a window, where the experts have as many

// The window for a launch: kOrderWindow where the plan's tiles (max_tiles_m, a bound on the
// used ones known on the host, which counts up to one padding tile per expert) come to
// kOrderWindow or more per expert on the mean, else 1.
ARGON_PADDED_HD inline int32_t order_window(int32_t max_tiles_m, int32_t n_experts) {
  return int64_t(max_tiles_m) >= int64_t(kOrderWindow) * n_experts ? kOrderWindow : 1;
}

struct TileMN {
  int32_t m;
  int32_t n;
};

ARGON_PADDED_HD inline TileMN work_tile(uint64_t work, int32_t used, int32_t tiles_n,
                                        int32_t window) {
  const uint64_t per_window = static_cast<uint64_t>(window) * static_cast<uint64_t>(tiles_n);
  const uint64_t index = work / per_window;
  const int32_t r = static_cast<int32_t>(work - index * per_window);
  const int32_t m0 = static_cast<int32_t>(index) * window;
  const int32_t rows = used - m0 < window ? used - m0 : window;
  return {m0 + r % rows, r / rows};
}

}  // namespace argon_hopper_padded
