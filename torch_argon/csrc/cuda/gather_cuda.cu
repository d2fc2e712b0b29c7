// moe_gather on CUDA: xs[r] = x[sorted_token[r]]; rows whose sorted_token is -1 are zero.
//
// Algorithm and launch: one warp per output row, 8 warps per block, grid-strided over rows.
// Vector path: each lane moves 16 bytes of input per step (8 halves or 4 floats) and issues
// kUnroll loads before its first store, so enough bytes are in flight to reach HBM speed on
// scattered 5 KB rows. Taken when H is a multiple of the vector and every row start is aligned;
// otherwise the same kernel runs one element per step. Same dtype: the bits are copied. A
// conversion goes through float (exact for fp16 / bf16) and rounds once, to nearest even.
// A sorted_token outside [0, T) (a corrupt plan) gives a zero row: nothing is read out of
// bounds, and no host sync is spent on checking.
#include <torch/library.h>

#include <type_traits>

#include "../checks.h"
#include "../op_signatures.h"
#include "../float_dispatch.h"
#include "cuda_common.cuh"

namespace argon::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;

template <typename in_t, typename out_t, int V>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gather_kernel(const in_t* __restrict__ x, int64_t x_stride, const int* __restrict__ tok,
                  out_t* __restrict__ out, int64_t R, int64_t T, int64_t H) {
  using InVec = Vec<in_t, V>;
  using OutVec = Vec<out_t, V>;
  const int lane = threadIdx.x & 31;
  const int64_t nvec = H / V;
  for (int64_t r = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5); r < R;
       r += int64_t{gridDim.x} * kWarpsPerBlock) {
    const int t = tok[r];
    OutVec* dst = reinterpret_cast<OutVec*>(out + r * H);
    if (t < 0 || t >= T) {
      OutVec zero;
#pragma unroll
      for (int j = 0; j < V; ++j) zero.v[j] = from_float<out_t>(0.f);
      for (int64_t v = lane; v < nvec; v += 32) dst[v] = zero;
      continue;
    }
    const InVec* src = reinterpret_cast<const InVec*>(x + t * x_stride);
    for (int64_t v0 = lane; v0 < nvec; v0 += 32 * kUnroll) {
      InVec buf[kUnroll];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        if (v0 + 32 * j < nvec) buf[j] = src[v0 + 32 * j];
      }
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        if (v0 + 32 * j >= nvec) continue;
        if constexpr (std::is_same_v<in_t, out_t>) {
          dst[v0 + 32 * j] = buf[j];
        } else {
          OutVec o;
#pragma unroll
          for (int e = 0; e < V; ++e) o.v[e] = from_float<out_t>(to_float(buf[j].v[e]));
          dst[v0 + 32 * j] = o;
        }
      }
    }
  }
}

template <typename in_t, typename out_t, int V>
void launch_gather(const Tensor& x, const Tensor& tok, const Tensor& out) {
  const int64_t R = tok.size(0);
  const int blocks = grid_for(R, kWarpsPerBlock, 16);
  gather_kernel<in_t, out_t, V><<<blocks, kWarpsPerBlock * 32, 0, stream()>>>(
      x.const_data_ptr<in_t>(), x.stride(0), tok.const_data_ptr<int>(), out.data_ptr<out_t>(), R,
      x.size(0), x.size(1));
  ARGON_CUDA_CHECK_LAUNCH();
}

void moe_gather_out_cuda(const Tensor& x_in, const Tensor& sorted_token_in, const Tensor& out) {
  check_gather(x_in, sorted_token_in, out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x_in.device());
  // Rows may be strided (a view into a wider tensor); elements within a row must be dense.
  const Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  const Tensor tok = sorted_token_in.contiguous();
  const int64_t H = x.size(1);
  ARGON_DISPATCH_FLOAT_PAIR(x.scalar_type(), out.scalar_type(), "moe_gather_cuda", [&] {
    constexpr int V = 16 / sizeof(in_t);
    const bool vec = H % V == 0 &&
                     rows_aligned(x.const_data_ptr(), x.stride(0), sizeof(in_t), V * sizeof(in_t)) &&
                     rows_aligned(out.data_ptr(), H, sizeof(out_t), V * sizeof(out_t));
    if (vec) {
      launch_gather<in_t, out_t, V>(x, tok, out);
    } else {
      launch_gather<in_t, out_t, 1>(x, tok, out);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) { m.impl("moe_gather_out", TORCH_FN(moe_gather_out_cuda)); }

}  // namespace argon::cuda
