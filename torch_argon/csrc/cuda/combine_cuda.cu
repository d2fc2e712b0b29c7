// moe_combine on CUDA: out[t] = sum_k w[t,k] * y[pos[t,k]] (+ shared[t]) (+ residual[t]).
//
// Arithmetic (bit-exact with the reference and the CPU): fp32, acc = acc + (w * y) in ascending
// k with __fmul_rn / __fadd_rn (never contracted into a fused multiply-add, whatever the
// flags), entries with pos -1 skipped (not multiplied by 0), then + shared, then + residual,
// rounded once to the output dtype.
//
// Launch: a thread owns V consecutive columns of one token (V = 16 bytes of y: 8 halves or 4
// floats); blockDim.x threads cover a token's row (up to 512), blockDim.y tokens share a block,
// and the grid has one block per blockDim.y tokens, so the hardware balances the blocks over
// the SMs (a fixed grid that grid-strides over tokens left some blocks with one token more than
// others: 1.47x the traffic floor at T = 2048 on an H200). Each thread loads the token's pos /
// weights (L1 broadcasts) and then up to kGroup = 12 rows of y at once before accumulating them
// in order, so a top-10 (or top-8) combine has all its loads in flight in one round.
// Traffic: the valid rows of y once, out once.
// Scalar fallback (V = 1) when H or the alignment of any operand does not admit the vector.
// A pos outside [-1, R) (a corrupt plan) is skipped like -1: nothing is read out of bounds.
#include <torch/library.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "../float_dispatch.h"
#include "cuda_common.cuh"

namespace argon::cuda {
namespace {

constexpr int kGroup = 10;  // rows of y in flight per thread

struct CombineParams {
  const void* y;
  int64_t y_stride;
  const int* pos;
  const void* w;
  FloatKind w_kind;
  const void* shared;  // nullable, [T, H] dense
  FloatKind shared_kind;
  const void* residual;  // nullable, [T, H] dense
  FloatKind residual_kind;
  void* out;
  int64_t T, K, H, R;
};

template <typename y_t, typename out_t, int V>
__global__ void __launch_bounds__(512) combine_kernel(CombineParams p) {
  const int64_t nvec = p.H / V;
  const int64_t v = threadIdx.x;
  const y_t* y = static_cast<const y_t*>(p.y);
  for (int64_t t = int64_t{blockIdx.x} * blockDim.y + threadIdx.y; t < p.T;
       t += int64_t{gridDim.x} * blockDim.y) {
    for (int64_t c = v; c < nvec; c += blockDim.x) {
      float acc[V];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = 0.f;
      for (int64_t k0 = 0; k0 < p.K; k0 += kGroup) {
        int row[kGroup];
        Vec<y_t, V> yv[kGroup];
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          const int64_t k = k0 + j;
          row[j] = k < p.K ? p.pos[t * p.K + k] : -1;
          if (row[j] >= p.R) row[j] = -1;
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          if (row[j] >= 0) {
            yv[j] = *reinterpret_cast<const Vec<y_t, V>*>(y + row[j] * p.y_stride + c * V);
          }
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          if (row[j] < 0) continue;
          const float wk = load_kind_scalar(p.w, p.w_kind, t * p.K + k0 + j);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            acc[e] = __fadd_rn(acc[e], __fmul_rn(wk, to_float(yv[j].v[e])));
          }
        }
      }
      const int64_t idx = t * p.H + c * V;
      if (p.shared) {
        float s[V];
        load_kind_as_float<V>(p.shared, p.shared_kind, idx, s);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = __fadd_rn(acc[e], s[e]);
      }
      if (p.residual) {
        float s[V];
        load_kind_as_float<V>(p.residual, p.residual_kind, idx, s);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = __fadd_rn(acc[e], s[e]);
      }
      Vec<out_t, V> o;
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = from_float<out_t>(acc[e]);
      *reinterpret_cast<Vec<out_t, V>*>(static_cast<out_t*>(p.out) + idx) = o;
    }
  }
}

template <typename y_t, typename out_t, int V>
void launch_combine(const CombineParams& p) {
  const int64_t nvec = p.H / V;
  const int tx = static_cast<int>(std::min<int64_t>(512, ceil_div(nvec, 32) * 32));
  const int ty = std::max(1, 256 / tx);
  const dim3 block(tx, ty);
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(p.T, ty), 0x7fffffff));
  combine_kernel<y_t, out_t, V><<<blocks, block, 0, stream()>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
}

void moe_combine_out_cuda(const Tensor& y_in, const Tensor& pos_in, const Tensor& w_in,
                          const OptTensor& shared_in, const OptTensor& residual_in,
                          const Tensor& out) {
  check_combine(y_in, pos_in, w_in, shared_in, residual_in, out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(y_in.device());
  const Tensor y = y_in.stride(1) == 1 ? y_in : y_in.contiguous();
  const Tensor pos = pos_in.contiguous(), w = w_in.contiguous();
  const Tensor shared = shared_in ? shared_in->contiguous() : Tensor();
  const Tensor residual = residual_in ? residual_in->contiguous() : Tensor();

  CombineParams p{};
  p.y = y.const_data_ptr();
  p.y_stride = y.stride(0);
  p.pos = pos.const_data_ptr<int>();
  p.w = w.const_data_ptr();
  p.w_kind = float_kind(w.scalar_type());
  if (shared.defined()) {
    p.shared = shared.const_data_ptr();
    p.shared_kind = float_kind(shared.scalar_type());
  }
  if (residual.defined()) {
    p.residual = residual.const_data_ptr();
    p.residual_kind = float_kind(residual.scalar_type());
  }
  p.out = out.data_ptr();
  p.T = pos.size(0);
  p.K = pos.size(1);
  p.H = y.size(1);
  p.R = y.size(0);

  ARGON_DISPATCH_FLOAT_PAIR(y.scalar_type(), out.scalar_type(), "moe_combine_cuda", [&] {
    constexpr int V = 16 / sizeof(in_t);
    auto extra_ok = [&](const Tensor& t) {
      return !t.defined() || rows_aligned(t.const_data_ptr(), p.H, t.element_size(),
                                          V * t.element_size());
    };
    const bool vec = p.H % V == 0 &&
                     rows_aligned(p.y, p.y_stride, sizeof(in_t), V * sizeof(in_t)) &&
                     rows_aligned(p.out, p.H, sizeof(out_t), V * sizeof(out_t)) &&
                     extra_ok(shared) && extra_ok(residual);
    if (vec) {
      launch_combine<in_t, out_t, V>(p);
    } else {
      launch_combine<in_t, out_t, 1>(p);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) { m.impl("moe_combine_out", TORCH_FN(moe_combine_out_cuda)); }

}  // namespace argon::cuda
