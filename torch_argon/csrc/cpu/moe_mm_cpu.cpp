// moe_mm on the CPU: out[rows of tile j] = xs[rows] @ w[tile_expert[j]]^T. Consecutive tiles of
// one expert (the plan lays them out so) become one torch matmul; tiles whose expert is -1 are
// written with zeros. The GEMM itself is torch's (parallel, vectorised): we only group rows.
#include <torch/library.h>

#include "../checks.h"
#include "../op_signatures.h"

namespace argon {
namespace {

void moe_mm_out_cpu(const Tensor& xs, const Tensor& w, const Tensor& tile_expert_in,
                    int64_t tile_m, const Tensor& out) {
  check_moe_mm(xs, w, tile_expert_in, tile_m, out);
  const Tensor tile_expert = tile_expert_in.contiguous();
  const int32_t* te = tile_expert.const_data_ptr<int32_t>();
  const int64_t n_tiles = tile_expert.size(0), E = w.size(0);
  for (int64_t j = 0; j < n_tiles; ++j) {
    TORCH_CHECK_VALUE(te[j] >= -1 && te[j] < E, "tile_expert[", j, "] = ", te[j],
                " is out of range: expected -1 or an expert of w in [0, ", E, ")");
  }
  for (int64_t j0 = 0; j0 < n_tiles;) {
    int64_t j1 = j0 + 1;
    while (j1 < n_tiles && te[j1] == te[j0]) ++j1;
    Tensor dst = out.narrow(0, j0 * tile_m, (j1 - j0) * tile_m);
    if (te[j0] < 0) {
      dst.zero_();
    } else {
      at::mm_out(dst, xs.narrow(0, j0 * tile_m, (j1 - j0) * tile_m), w.select(0, te[j0]).t());
    }
    j0 = j1;
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("moe_mm_out", TORCH_FN(moe_mm_out_cpu)); }

}  // namespace argon
