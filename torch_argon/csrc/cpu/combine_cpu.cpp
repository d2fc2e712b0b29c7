// moe_combine on the CPU: out[t] = sum_k w[t,k] * y[pos[t,k]] (+ shared[t]) (+ residual[t]).
// Accumulated in fp32 in ascending k as acc = acc + (w * y), each step rounded (the build uses
// -ffp-contract=off, so no fused multiply-add changes the bits), rounded once at the store.
// Parallel over tokens; each token's fp32 accumulator row lives in a per-thread buffer.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "../checks.h"
#include "../op_signatures.h"
#include "../float_dispatch.h"

namespace argon {
namespace {

template <typename src_t>
void add_row(float* acc, const src_t* src, int64_t H) {
  for (int64_t h = 0; h < H; ++h) acc[h] = acc[h] + static_cast<float>(src[h]);
}

void moe_combine_out_cpu(const Tensor& y_in, const Tensor& pos_in, const Tensor& w_in,
                         const OptTensor& shared_in, const OptTensor& residual_in,
                         const Tensor& out) {
  check_combine(y_in, pos_in, w_in, shared_in, residual_in, out);
  const Tensor y = y_in.contiguous(), pos = pos_in.contiguous();
  const Tensor w = w_in.to(at::kFloat).contiguous();  // exact for fp16 / bf16
  const int64_t T = pos.size(0), K = pos.size(1), H = y.size(1), R = y.size(0);
  const int32_t* p = pos.const_data_ptr<int32_t>();
  for (int64_t i = 0; i < T * K; ++i) {
    TORCH_CHECK_VALUE(p[i] >= -1 && p[i] < R, "pos[", i / K, ", ", i % K, "] = ", p[i],
                " is out of range: expected -1 or a row of y in [0, ", R, ")");
  }
  const float* wt = w.const_data_ptr<float>();
  std::optional<Tensor> shared, residual;
  if (shared_in) shared = shared_in->contiguous();
  if (residual_in) residual = residual_in->contiguous();

  ARGON_DISPATCH_FLOAT_PAIR(y.scalar_type(), out.scalar_type(), "moe_combine", [&] {
    const in_t* ys = y.const_data_ptr<in_t>();
    out_t* dst = out.data_ptr<out_t>();
    at::parallel_for(0, T, std::max<int64_t>(1, 16384 / std::max<int64_t>(H, 1)), [&](int64_t t0, int64_t t1) {
      std::vector<float> acc(H);
      for (int64_t t = t0; t < t1; ++t) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t k = 0; k < K; ++k) {
          const int32_t r = p[t * K + k];
          if (r < 0) continue;
          const float wk = wt[t * K + k];
          const in_t* row = ys + r * H;
          for (int64_t h = 0; h < H; ++h) acc[h] = acc[h] + wk * static_cast<float>(row[h]);
        }
        for (const auto* extra : {&shared, &residual}) {
          if (!extra->has_value()) continue;
          ARGON_DISPATCH_FLOAT((*extra)->scalar_type(), "moe_combine_add", [&] {
            add_row(acc.data(), (*extra)->const_data_ptr<scalar_t>() + t * H, H);
          });
        }
        out_t* o = dst + t * H;
        for (int64_t h = 0; h < H; ++h) o[h] = static_cast<out_t>(acc[h]);
      }
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("moe_combine_out", TORCH_FN(moe_combine_out_cpu)); }

}  // namespace argon
