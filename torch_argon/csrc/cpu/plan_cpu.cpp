// moe_plan on the CPU.
//
// Algorithm: the T*K entries are cut into C contiguous chunks (C depends only on the size, so
// the bytes never depend on the thread count). (1) histogram: each chunk counts its entries per
// expert and checks every id; (2) scan: one pass over experts gives counts, padded offsets and,
// per chunk, the first row of its entries in each expert; (3) place: each chunk walks its
// entries in ascending flat index and hands out rows from its cursors, which is exactly the
// stable order the contract asks for; (4) padding and tail rows, tile map and meta.
// Memory: a [C, E] int32 table, C bounded so that it stays within kScratchBytes, or one row of E
// (the size of the counts output) when E alone is larger. Out-of-range ids raise before anything
// is written. Threads: over the C chunks (one below 2 * kMinChunkEntries entries) and, in step
// (4), over experts where the fill is large enough (kMinFillPerThread): a small plan opens no
// parallel region.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <vector>

#include "../checks.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"

namespace argon {
namespace {

constexpr int64_t kMinChunkEntries = 16384;
// Stores worth a thread of their own in step (4). An OpenMP region costs microseconds on an
// idle machine and milliseconds when other processes hold the cores (~12 ms a call for a
// region over 128 experts at T = 0 on a busy 2-core host), so a fill smaller than this per
// thread runs on the caller's thread.
constexpr int64_t kMinFillPerThread = int64_t{1} << 16;
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kScratchBytes = int64_t{64} << 20;

// Chunks for n entries over E experts: enough to split the work, few enough for the scratch
// budget. A function of (n, E) only, so the output bytes never depend on the thread count.
int64_t plan_chunks(int64_t n, int64_t E) {
  const int64_t by_memory = std::max<int64_t>(1, kScratchBytes / (E * int64_t{sizeof(int32_t)}));
  return std::clamp<int64_t>(n / kMinChunkEntries, 1, std::min(kMaxChunks, by_memory));
}

template <typename id_t>
void plan_kernel(const PlanDims& d, const id_t* ids, const at::Tensor& weights, int32_t* counts,
                 int32_t* offsets, int32_t* sorted_token, float* sorted_weight, int32_t* pos,
                 int32_t* tile_expert, int32_t* meta) {
  const int64_t n = d.entries(), E = d.E, tm = d.tile_m, K = d.K;
  const int64_t n_chunks = plan_chunks(n, E);
  const int64_t chunk = (n + n_chunks - 1) / n_chunks;
  std::vector<int32_t> cursor;
  try {
    cursor.assign(n_chunks * E, 0);
  } catch (const std::bad_alloc&) {
    TORCH_CHECK(false, "moe_plan: n_expert=", E, " needs ", n_chunks * E * sizeof(int32_t),
                " bytes of scratch (one int32 per expert and chunk), which could not be "
                "allocated");
  }

  // (1) per-chunk histograms, with the range check.
  std::atomic<int64_t> first_bad{n};
  at::parallel_for(0, n_chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int32_t* h = cursor.data() + c * E;
      const int64_t end = std::min(n, (c + 1) * chunk);
      for (int64_t i = c * chunk; i < end; ++i) {
        const int64_t e = static_cast<int64_t>(ids[i]);
        if (e >= 0 && e < E) {
          ++h[e];
        } else if (e != -1) {
          int64_t prev = first_bad.load();
          while (i < prev && !first_bad.compare_exchange_weak(prev, i)) {
          }
        }
      }
    }
  });
  if (first_bad.load() < n) {
    const int64_t i = first_bad.load();
    TORCH_CHECK_VALUE(false, "topk_ids[", i / K, ", ", i % K, "] = ", static_cast<int64_t>(ids[i]),
                " is out of range: ids must be in [0, n_expert=", E, ") or -1 (skipped)");
  }

  // (2) scan over experts: counts, padded offsets, and each chunk's first row per expert.
  int64_t row = 0, valid = 0;
  offsets[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    int64_t total = 0;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int32_t here = cursor[c * E + e];
      cursor[c * E + e] = static_cast<int32_t>(row + total);
      total += here;
    }
    counts[e] = static_cast<int32_t>(total);
    valid += total;
    row += (total + tm - 1) / tm * tm;
    offsets[e + 1] = static_cast<int32_t>(row);
  }
  const int64_t n_rows = row;

  // (3) stable placement: each chunk in ascending flat index.
  ARGON_DISPATCH_FLOAT(weights.scalar_type(), "moe_plan_w", [&] {
    const scalar_t* w = weights.const_data_ptr<scalar_t>();
    at::parallel_for(0, n_chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        int32_t* cur = cursor.data() + c * E;
        const int64_t end = std::min(n, (c + 1) * chunk);
        for (int64_t i = c * chunk; i < end; ++i) {
          const int64_t e = static_cast<int64_t>(ids[i]);
          if (e < 0) {
            pos[i] = -1;
            continue;
          }
          const int32_t r = cur[e]++;
          sorted_token[r] = static_cast<int32_t>(i / K);
          sorted_weight[r] = static_cast<float>(w[i]);
          pos[i] = r;
        }
      }
    });
  });

  // (4) padding rows of each expert, the tail past n_rows, the tile map, meta: a few stores per
  // expert, padding row and tile, split over threads only where they add up.
  const int64_t fill = E + (n_rows - valid) + n_rows / tm;
  const int64_t experts_per_task = std::max<int64_t>(64, E * kMinFillPerThread / fill);
  at::parallel_for(0, E, experts_per_task, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      for (int64_t r = offsets[e] + counts[e]; r < offsets[e + 1]; ++r) {
        sorted_token[r] = -1;
        sorted_weight[r] = 0.f;
      }
      for (int64_t j = offsets[e] / tm; j < offsets[e + 1] / tm; ++j) tile_expert[j] = static_cast<int32_t>(e);
    }
  });
  std::fill(sorted_token + n_rows, sorted_token + d.r_max, -1);
  std::fill(sorted_weight + n_rows, sorted_weight + d.r_max, 0.f);
  std::fill(tile_expert + n_rows / tm, tile_expert + d.n_tiles, -1);
  meta[ARGON_META_N_ROWS] = static_cast<int32_t>(n_rows);
  meta[ARGON_META_N_TILES] = static_cast<int32_t>(n_rows / tm);
  meta[ARGON_META_N_VALID] = static_cast<int32_t>(valid);
  meta[ARGON_META_N_BAD_IDS] = 0;
}

void moe_plan_out_cpu(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                      int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                      const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                      const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, topk_weights, counts, offsets, sorted_token, sorted_weight, pos,
                     tile_expert, meta);
  const Tensor ids = topk_ids.contiguous();
  const Tensor w = topk_weights.contiguous();
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "moe_plan_ids", [&] {
    plan_kernel<index_t>(d, ids.const_data_ptr<index_t>(), w, counts.data_ptr<int32_t>(),
                         offsets.data_ptr<int32_t>(), sorted_token.data_ptr<int32_t>(),
                         sorted_weight.data_ptr<float>(), pos.data_ptr<int32_t>(),
                         tile_expert.data_ptr<int32_t>(), meta.data_ptr<int32_t>());
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("moe_plan_out", TORCH_FN(moe_plan_out_cpu)); }

}  // namespace argon
