// moe_mm_weight_grad on the CPU: out[e] = sum over the rows r of tiles with tile_expert == e of
// grad_out[r]^T xs[r] ([N, Kd], moe_mm's weight layout), accumulated in fp32 and rounded once;
// experts with no tile get zeros. The GEMMs are torch's (MKL's sgemm), single-threaded inside
// one parallel region, as moe_mm's are (moe_mm_cpu.cpp says why).
//
// Work: consecutive tiles of one expert form a run of rows; an expert's runs are summed in
// ascending row order into its fp32 accumulator (the first run with mm, the rest with addmm).
// Each expert's N output rows are cut into blocks of kBlockCols, and the (expert, block) items
// are taken by the threads largest first from a shared counter. An item's result depends only
// on its rows and columns, never on the thread that took it or on the thread count, so the same
// inputs give the same bytes: no atomics in the sums, a fixed order.
// fp16 / bf16: each run's operands are widened to fp32 (exact), multiplied by sgemm and added
// to the fp32 accumulator, which is rounded once into out.
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "../checks.h"
#include "../op_signatures.h"

namespace argon {
namespace {

// Output rows (of N) per work item: splits the largest experts over the threads, and keeps each
// GEMM's M large enough for sgemm.
constexpr int64_t kBlockCols = 256;

struct RowRun {
  int64_t row0, rows;
};

struct GradItem {
  int64_t expert, col0, cols, rows;  // rows: the expert's total, the item's cost
};

void moe_mm_weight_grad_out_cpu(const Tensor& xs, const Tensor& grad_out,
                                const Tensor& tile_expert_in, int64_t tile_m, int64_t n_expert,
                                const Tensor& out) {
  check_moe_mm_weight_grad(xs, grad_out, tile_expert_in, tile_m, n_expert, out);
  const Tensor tile_expert = tile_expert_in.contiguous();
  const int32_t* te = tile_expert.const_data_ptr<int32_t>();
  const int64_t n_tiles = tile_expert.size(0), E = n_expert;
  for (int64_t j = 0; j < n_tiles; ++j) {
    TORCH_CHECK_VALUE(te[j] >= -1 && te[j] < E, "tile_expert[", j, "] = ", te[j],
                      " is out of range: expected -1 or an expert in [0, n_expert=", E, ")");
  }
  if (out.numel() == 0) return;
  const int64_t N = out.size(1);
  std::vector<std::vector<RowRun>> runs(E);
  std::vector<int64_t> expert_rows(E, 0);
  for (int64_t j0 = 0; j0 < n_tiles;) {
    int64_t j1 = j0 + 1;
    while (j1 < n_tiles && te[j1] == te[j0]) ++j1;
    if (te[j0] >= 0) {
      runs[te[j0]].push_back({j0 * tile_m, (j1 - j0) * tile_m});
      expert_rows[te[j0]] += (j1 - j0) * tile_m;
    }
    j0 = j1;
  }
  std::vector<GradItem> items;
  for (int64_t e = 0; e < E; ++e) {
    if (expert_rows[e] == 0 || xs.size(0) == 0) {
      out.select(0, e).zero_();  // no rows: an empty sum
      continue;
    }
    for (int64_t c = 0; c < N; c += kBlockCols) {
      items.push_back({e, c, std::min(kBlockCols, N - c), expert_rows[e]});
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const GradItem& a, const GradItem& b) { return a.rows > b.rows; });
  const bool widen = xs.scalar_type() != at::kFloat;
  const int64_t n_items = static_cast<int64_t>(items.size());
  std::atomic<int64_t> next{0};
  const at::ThreadLocalState caller_state;  // grad / inference mode for the ops below
  auto run_items = [&](int64_t, int64_t) {
    at::ThreadLocalStateGuard state_guard(caller_state);
    for (int64_t i; (i = next.fetch_add(1)) < n_items;) {
      const GradItem& it = items[i];
      Tensor dst = out.select(0, it.expert).narrow(0, it.col0, it.cols);
      Tensor acc = widen ? at::empty({it.cols, xs.size(1)}, xs.options().dtype(at::kFloat)) : dst;
      bool first = true;
      for (const RowRun& run : runs[it.expert]) {
        Tensor dy = grad_out.narrow(0, run.row0, run.rows).narrow(1, it.col0, it.cols);
        Tensor x = xs.narrow(0, run.row0, run.rows);
        if (widen) {
          dy = dy.to(at::kFloat);
          x = x.to(at::kFloat);
        }
        if (first) {
          at::cpu::mm_out(acc, dy.t(), x);
        } else {
          at::cpu::addmm_(acc, dy.t(), x);
        }
        first = false;
      }
      if (widen) dst.copy_(acc);
    }
  };
  const int64_t n_tasks = std::min<int64_t>(at::get_num_threads(), n_items);
  if (n_tasks <= 1) {
    run_items(0, 1);
  } else {
    at::parallel_for(0, n_tasks, 1, run_items);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) {
  m.impl("moe_mm_weight_grad_out", TORCH_FN(moe_mm_weight_grad_out_cpu));
}

}  // namespace argon
