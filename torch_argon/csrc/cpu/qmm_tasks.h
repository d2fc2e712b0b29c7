// The work of a CPU moe_qmm call, shared by its exact-dequant path (moe_qmm_cpu.cpp) and its q8
// path (moe_qmm_q8_cpu.cpp): consecutive tiles of one expert form a segment (the plan lays each
// expert's tiles out together), a segment's rows are cut into even chunks of at most max_rows,
// the expert's N weight rows into blocks of bn, and a task is one (row chunk, weight block)
// pair. Tasks depend on the plan and the shapes only; each output element is computed by one
// task, so the result does not depend on which thread runs which task.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu_clones.h"

namespace argon {
namespace {

struct QmmChunk {
  int32_t expert;
  int64_t r0, rows;  // rows of xs / out
};

struct QmmTask {
  int32_t expert;
  int64_t r0, rows;  // rows of xs / out
  int64_t n0, cols;  // weight rows of the expert = columns of out
};

// The row chunks of the tiles of experts >= 0; rows of tiles of expert -1 are zeroed in out.
inline std::vector<QmmChunk> qmm_row_chunks(const int32_t* te, int64_t n_tiles, int64_t tile_m,
                                            int64_t max_rows, const at::Tensor& out) {
  std::vector<QmmChunk> chunks;
  for (int64_t j0 = 0; j0 < n_tiles;) {
    int64_t j1 = j0 + 1;
    while (j1 < n_tiles && te[j1] == te[j0]) ++j1;
    const int64_t r0 = j0 * tile_m, r1 = j1 * tile_m;
    if (te[j0] < 0) {
      out.narrow(0, r0, r1 - r0).zero_();
    } else {
      // Even chunks (a 4-row remainder would pay a whole weight tile's dequant).
      const int64_t n_chunks = (r1 - r0 + max_rows - 1) / max_rows;
      const int64_t size = (r1 - r0 + n_chunks - 1) / n_chunks;
      for (int64_t r = r0; r < r1; r += size) chunks.push_back({te[j0], r, std::min(size, r1 - r)});
    }
    j0 = j1;
  }
  return chunks;
}

inline std::vector<QmmTask> qmm_tasks(const std::vector<QmmChunk>& chunks, int64_t N,
                                      int64_t bn) {
  std::vector<QmmTask> tasks;
  tasks.reserve(chunks.size() * ((N + bn - 1) / bn));
  for (const QmmChunk& ch : chunks) {
    for (int64_t n0 = 0; n0 < N; n0 += bn) {
      tasks.push_back(QmmTask{ch.expert, ch.r0, ch.rows, n0, std::min(bn, N - n0)});
    }
  }
  return tasks;
}

// Weight rows per task: at most max_values dequantized values per task (its tile stays in L2),
// at least min_block rows, and halved (down to min_block) until the threads have 4 tasks each.
// A multiple of `multiple` (the q8 panels' 16 columns) unless it is N itself.
inline int64_t qmm_weight_block(int64_t N, int64_t n_in, int64_t row_chunks, int64_t max_values,
                                int64_t min_block, int64_t multiple) {
  int64_t bn = std::max<int64_t>(min_block, max_values / std::max<int64_t>(n_in, 1));
  bn = std::min(bn, N);
  const int64_t want_tasks = 4 * static_cast<int64_t>(at::get_num_threads());
  while (bn > min_block && row_chunks * ((N + bn - 1) / bn) < want_tasks) bn = (bn + 1) / 2;
  if (bn < N) bn = std::max<int64_t>(multiple, bn / multiple * multiple);
  return std::max<int64_t>(bn, 1);
}

// out[r * out_stride + j] = c[r * ldc + j] rounded once to out_t.
template <typename out_t>
ARGON_CPU_CLONES void store_rows(const float* c, int64_t ldc, int64_t rows, int64_t cols,
                                 out_t* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) out[r * out_stride + j] = static_cast<out_t>(c[r * ldc + j]);
  }
}

// A thread's buffer of at least n elements, grown as needed and kept.
template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

}  // namespace
}  // namespace argon
