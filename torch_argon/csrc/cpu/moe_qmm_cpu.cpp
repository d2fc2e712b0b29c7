// moe_qmm on the CPU: out[rows of tile j] = xs[rows] @ dequant(w_q[e])^T with e = tile_expert[j],
// fp32 accumulation, rounded once to xs's dtype; rows of tiles whose expert is -1 are zero.
// The dequantized weights never exist whole, only a tile of them per thread:
//
// - Work. Consecutive tiles of one expert form a segment (the plan lays each expert's tiles out
//   together); a segment's rows are cut into chunks of at most kMaxRows, the expert's N weight
//   rows into blocks of bn, and a task is one (row chunk, weight block) pair.
// - A task dequantizes its bn weight rows x n_in values (quant_blocks.h, bit-exact) into a
//   per-thread fp32 buffer, bn chosen so that the buffer stays in L2 (kWeightTileValues), then one
//   fp32 GEMM (torch's CPU mm: MKL or the platform BLAS) multiplies the chunk's rows with it into
//   a per-thread fp32 result, which is rounded once into out. fp16 / bf16 rows of xs are widened
//   to fp32 once per row chunk and thread. The buffers are thread-local and reused across calls:
//   a call allocates no memory beyond its output once they have grown.
// - Parallelism: tasks are handed out through an atomic counter (balance under skewed routing)
//   to at::get_num_threads() workers. Each task computes the same bits whichever thread runs it,
//   and its GEMM always runs single-threaded (inside the parallel region, or with torch's one
//   thread), so the result does not depend on the thread count.
// Limits: the per-thread buffers hold bn * n_in + kMaxRows * (n_in + bn) floats (about 2.5 MB
// at n_in = 1024); tile_expert values outside [-1, E) raise a ValueError.
#include <ATen/Parallel.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "../checks.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cpu_clones.h"
#include "moe_qmm_q8_cpu.h"
#include "qmm_tasks.h"
#include "quant_blocks_cpu.h"

namespace argon {
namespace {

constexpr int64_t kMaxRows = 512;                 // rows of xs per task
constexpr int64_t kWeightTileValues = 64 * 1024;  // dequantized weights per task (256 KB fp32)
constexpr int64_t kMinBlock = 16;                 // fewest weight rows per task

// Thread-local scratch, grown on demand and kept: the dequantized weight tile, the widened rows
// of xs (tagged with the call and row chunk they hold), the GEMM's result.
struct Scratch {
  std::vector<float> w, x, c;
  uint64_t x_call = 0;
  int64_t x_r0 = -1;
};
thread_local Scratch scratch;
std::atomic<uint64_t> call_counter{0};

template <typename in_t>
ARGON_CPU_CLONES void widen_rows(const in_t* x, int64_t row_stride, int64_t col_stride,
                                 int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) out[r * cols + k] = static_cast<float>(x[r * row_stride + k * col_stride]);
  }
}

void moe_qmm_out_cpu(const Tensor& xs, const Tensor& w_q_in, int64_t qtype, int64_t n_in,
                     const Tensor& tile_expert_in, int64_t tile_m,
                     c10::string_view activation_quant, const Tensor& out) {
  check_moe_qmm(xs, w_q_in, qtype, n_in, tile_expert_in, tile_m, activation_quant, out);
  const Tensor tile_expert = tile_expert_in.contiguous();
  const int32_t* te = tile_expert.const_data_ptr<int32_t>();
  const int64_t n_tiles = tile_expert.size(0), E = w_q_in.size(0), N = w_q_in.size(1);
  for (int64_t j = 0; j < n_tiles; ++j) {
    TORCH_CHECK_VALUE(te[j] >= -1 && te[j] < E, "tile_expert[", j, "] = ", te[j],
                      " is out of range: expected -1 or an expert of w_q in [0, ", E, ")");
  }
  if (out.numel() == 0) return;
  if (n_in == 0) {  // empty sums
    out.zero_();
    return;
  }
  const Tensor w_q = w_q_in.stride(2) == 1 ? w_q_in : w_q_in.contiguous();
  if (check_activation_quant(activation_quant) == ActivationQuant::kQ8) {
    return moe_qmm_q8_cpu(xs, w_q, qtype, n_in, te, n_tiles, tile_m, out);
  }
  const std::vector<QmmChunk> chunks = qmm_row_chunks(te, n_tiles, tile_m, kMaxRows, out);
  if (chunks.empty()) return;
  const int64_t bn = qmm_weight_block(N, n_in, static_cast<int64_t>(chunks.size()),
                                      kWeightTileValues, kMinBlock, 1);
  const std::vector<QmmTask> tasks = qmm_tasks(chunks, N, bn);

  const uint64_t call = ++call_counter;
  const uint8_t* w_data = w_q.const_data_ptr<uint8_t>();
  const int64_t w_expert_stride = w_q.stride(0), w_row_stride = w_q.stride(1);
  std::atomic<int64_t> next{0};
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  ARGON_DISPATCH_FLOAT(xs.scalar_type(), "moe_qmm", [&] {
    dispatch_quant_format(qtype, [&]<typename Block, int ELEMS, int BYTES, ChunkDequant<Block> DQ>() {
      at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
        Scratch& s = scratch;
        for (int64_t t = next.fetch_add(1); t < n_tasks; t = next.fetch_add(1)) {
          const QmmTask& task = tasks[t];
          float* w_tile = grow(s.w, task.cols * n_in);
          dequantize_rows<Block, ELEMS, DQ>(
              w_data + task.expert * w_expert_stride + task.n0 * w_row_stride, w_row_stride,
              task.cols, n_in, w_tile);
          Tensor a;
          if constexpr (std::is_same_v<scalar_t, float>) {
            a = xs.narrow(0, task.r0, task.rows);
          } else {
            float* x_rows = grow(s.x, kMaxRows * n_in);
            if (s.x_call != call || s.x_r0 != task.r0) {
              widen_rows(xs.const_data_ptr<scalar_t>() + task.r0 * xs.stride(0), xs.stride(0),
                         xs.stride(1), task.rows, n_in, x_rows);
              s.x_call = call;
              s.x_r0 = task.r0;
            }
            a = at::from_blob(x_rows, {task.rows, n_in}, at::kFloat);
          }
          float* c = grow(s.c, kMaxRows * bn);
          Tensor c_t = at::from_blob(c, {task.rows, task.cols}, at::kFloat);
          at::cpu::mm_out(c_t, a, at::from_blob(w_tile, {task.cols, n_in}, at::kFloat).t());
          store_rows(c, task.cols, task.rows, task.cols,
                     out.data_ptr<scalar_t>() + task.r0 * N + task.n0, N);
        }
      });
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("moe_qmm_out", TORCH_FN(moe_qmm_out_cpu)); }

}  // namespace argon
