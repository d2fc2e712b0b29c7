// What the <metal_stdlib> shim needs from the host runner: the position of the calling lane and
// the two synchronisation points of a threadgroup (all its lanes; the 32 lanes of a simdgroup).
// Kept free of torch so the standalone ThreadSanitizer build (.ci/tsan.sh) uses it unchanged.
#pragma once
#include <cstdint>

namespace argon_host {

struct LanePosition {
  uint32_t tgid[3];      // threadgroup_position_in_grid
  uint32_t tid[3];       // thread_position_in_threadgroup
  uint32_t tg_size[3];   // threads_per_threadgroup
  uint32_t grid_tgs[3];  // threadgroups_per_grid
  uint32_t flat;         // thread_index_in_threadgroup
  uint32_t simd_group;   // simdgroup_index_in_threadgroup
  uint32_t simd_lane;    // thread_index_in_simdgroup
};

constexpr uint32_t kSimdWidth = 32;

// The lane running on this host thread (set by the runner for every lane it executes).
const LanePosition& current_lane();

// threadgroup_barrier: every lane of the threadgroup must reach the same call site. A lane that
// returns instead, or reaches another barrier, makes every lane fail with a clear error.
void threadgroup_sync(const char* file, int line);

// A simdgroup exchange: each lane publishes 8 bytes, waits for the other lanes of its simdgroup,
// and then reads all 32 slots through `slots` until the matching simd_exchange_done call.
const uint64_t* simd_exchange_begin(uint64_t value, const char* file, int line);
void simd_exchange_done(const char* file, int line);

}  // namespace argon_host
