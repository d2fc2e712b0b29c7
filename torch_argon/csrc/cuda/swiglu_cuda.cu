// swiglu on CUDA: out = act(g) * u in fp32, rounded once; act = silu(g) = g / (1 + exp(-g)), or
// gelu in its erf or tanh form (csrc/shared/activation.h: the formulas), a template parameter.
//
// Inputs: two [R, I] tensors, or one [R, 2I] tensor whose second half is `up` (same row, I
// columns on). Launch: a flat grid-stride loop over (row, vector) pairs; each thread loads V
// consecutive gate and up elements (16 bytes of input each) and stores V outputs. Scalar
// fallback (V = 1) when I or an operand's alignment does not admit the vector.
// Accuracy: expf (not __expf); the contract compares with a tolerance of a few ulps. The value is
// argon_gated (shared/activation.h), which the padded Hopper GEMM's fused gate/up epilogue
// computes too: the two agree bit for bit (both units built with --fmad=false).
#include <torch/library.h>

#include "../checks.h"
#include "shared/activation.h"
#include "../op_signatures.h"
#include "../float_dispatch.h"
#include "cuda_common.cuh"
#include "cuda_math.cuh"

namespace argon::cuda {
namespace {

template <typename in_t, typename out_t, int V, int Act>
__global__ void __launch_bounds__(256)
    swiglu_kernel(const in_t* __restrict__ gate, const in_t* __restrict__ up, int64_t g_stride,
                  int64_t u_stride, out_t* __restrict__ out, int64_t R, int64_t I) {
  const int64_t nvec = I / V;
  const int64_t total = R * nvec;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / nvec, c = (idx - r * nvec) * V;
    float g[V], u[V];
    load_as_float<in_t, V>(gate + r * g_stride + c, g);
    load_as_float<in_t, V>(up + r * u_stride + c, u);
    Vec<out_t, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e)
      o.v[e] = from_float<out_t>(argon_gated<CudaMath>(g[e], u[e], Act));
    *reinterpret_cast<Vec<out_t, V>*>(out + r * I + c) = o;
  }
}

template <typename in_t, typename out_t, int V>
void launch_swiglu(int act, const in_t* g, const in_t* u, int64_t g_stride, int64_t u_stride,
                   out_t* out, int64_t R, int64_t I) {
  const int threads = 256;
  const int blocks = grid_for(R * (I / V), threads);
  if (act == ARGON_ACT_GELU) {
    swiglu_kernel<in_t, out_t, V, ARGON_ACT_GELU><<<blocks, threads, 0, stream()>>>(
        g, u, g_stride, u_stride, out, R, I);
  } else if (act == ARGON_ACT_GELU_TANH) {
    swiglu_kernel<in_t, out_t, V, ARGON_ACT_GELU_TANH><<<blocks, threads, 0, stream()>>>(
        g, u, g_stride, u_stride, out, R, I);
  } else {
    swiglu_kernel<in_t, out_t, V, ARGON_ACT_SILU><<<blocks, threads, 0, stream()>>>(
        g, u, g_stride, u_stride, out, R, I);
  }
  ARGON_CUDA_CHECK_LAUNCH();
}

void swiglu_out_cuda(const Tensor& gate_in, const OptTensor& up_in, c10::string_view activation,
                     const Tensor& out) {
  const int act = check_swiglu(gate_in, up_in, activation, out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(gate_in.device());
  const Tensor gate = gate_in.stride(1) == 1 ? gate_in : gate_in.contiguous();
  Tensor up;
  if (up_in) {
    up = up_in->stride(1) == 1 ? *up_in : up_in->contiguous();
  }
  const int64_t R = out.size(0), I = out.size(1);
  ARGON_DISPATCH_FLOAT_PAIR(gate.scalar_type(), out.scalar_type(), "swiglu_cuda", [&] {
    const in_t* g = gate.const_data_ptr<in_t>();
    const in_t* u = up.defined() ? up.const_data_ptr<in_t>() : g + I;
    const int64_t g_stride = gate.stride(0), u_stride = up.defined() ? up.stride(0) : g_stride;
    constexpr int V = 16 / sizeof(in_t);
    const bool vec = I % V == 0 && rows_aligned(g, g_stride, sizeof(in_t), 16) &&
                     rows_aligned(u, u_stride, sizeof(in_t), 16) &&
                     rows_aligned(out.data_ptr(), I, sizeof(out_t), V * sizeof(out_t));
    if (vec) {
      launch_swiglu<in_t, out_t, V>(act, g, u, g_stride, u_stride, out.data_ptr<out_t>(), R, I);
    } else {
      launch_swiglu<in_t, out_t, 1>(act, g, u, g_stride, u_stride, out.data_ptr<out_t>(), R, I);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) { m.impl("swiglu_out", TORCH_FN(swiglu_out_cuda)); }

}  // namespace argon::cuda
