// swiglu_backward on CUDA: with a = act(g) and a' its derivative (shared/activation.h),
// out[r, i] = grad_out * u * a' (d gate) and out[r, I + i] = grad_out * a (d up), in fp32, each
// rounded once to gate's dtype. Inputs as swiglu takes them: two [R, I] tensors or one [R, 2I]
// (gate half, then up half); grad_out [R, I] of any float dtype.
// Launch: a flat grid-stride loop over the R * I elements, one (d gate, d up) pair per thread
// and step, 256 threads a block. Every element depends only on its inputs: the same bytes run
// to run. Accuracy: CUDA's expf, erff, tanhf; a few ulps of the reference's float64 formulas.
#include <torch/library.h>

#include "../checks.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cuda_common.cuh"
#include "cuda_math.cuh"
#include "shared/activation.h"

namespace argon::cuda {
namespace {

template <typename grad_t, typename value_t, int Act>
__global__ void __launch_bounds__(256)
    swiglu_backward_kernel(const grad_t* __restrict__ dy, int64_t dy_stride,
                           const value_t* __restrict__ gate, const value_t* __restrict__ up,
                           int64_t g_stride, int64_t u_stride, value_t* __restrict__ out,
                           int64_t R, int64_t I) {
  const int64_t total = R * I;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / I, c = idx - r * I;
    const float d = to_float(dy[r * dy_stride + c]);
    const float u = to_float(up[r * u_stride + c]);
    const ArgonActGrad a = argon_activation_grad<CudaMath>(to_float(gate[r * g_stride + c]), Act);
    out[r * 2 * I + c] = from_float<value_t>(d * u * a.slope);
    out[r * 2 * I + I + c] = from_float<value_t>(d * a.value);
  }
}

template <typename grad_t, typename value_t>
void launch_swiglu_backward(int act, const grad_t* dy, int64_t dy_stride, const value_t* g,
                            const value_t* u, int64_t g_stride, int64_t u_stride, value_t* out,
                            int64_t R, int64_t I) {
  const int threads = 256;
  const int blocks = grid_for(R * I, threads);
  if (act == ARGON_ACT_GELU) {
    swiglu_backward_kernel<grad_t, value_t, ARGON_ACT_GELU><<<blocks, threads, 0, stream()>>>(
        dy, dy_stride, g, u, g_stride, u_stride, out, R, I);
  } else if (act == ARGON_ACT_GELU_TANH) {
    swiglu_backward_kernel<grad_t, value_t, ARGON_ACT_GELU_TANH>
        <<<blocks, threads, 0, stream()>>>(dy, dy_stride, g, u, g_stride, u_stride, out, R, I);
  } else {
    swiglu_backward_kernel<grad_t, value_t, ARGON_ACT_SILU><<<blocks, threads, 0, stream()>>>(
        dy, dy_stride, g, u, g_stride, u_stride, out, R, I);
  }
  ARGON_CUDA_CHECK_LAUNCH();
}

void swiglu_backward_out_cuda(const Tensor& grad_out_in, const Tensor& gate_in,
                              const OptTensor& up_in, c10::string_view activation,
                              const Tensor& out) {
  const int act = check_swiglu_backward(grad_out_in, gate_in, up_in, activation, out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(gate_in.device());
  const Tensor dy = grad_out_in.stride(1) == 1 ? grad_out_in : grad_out_in.contiguous();
  const Tensor gate = gate_in.stride(1) == 1 ? gate_in : gate_in.contiguous();
  Tensor up;
  if (up_in) {
    up = up_in->stride(1) == 1 ? *up_in : up_in->contiguous();
  }
  const int64_t R = out.size(0), I = out.size(1) / 2;
  ARGON_DISPATCH_FLOAT_PAIR(dy.scalar_type(), gate.scalar_type(), "swiglu_backward_cuda", [&] {
    using grad_t = in_t;
    using value_t = out_t;
    const value_t* g = gate.const_data_ptr<value_t>();
    const value_t* u = up.defined() ? up.const_data_ptr<value_t>() : g + I;
    const int64_t g_stride = gate.stride(0), u_stride = up.defined() ? up.stride(0) : g_stride;
    launch_swiglu_backward<grad_t, value_t>(act, dy.const_data_ptr<grad_t>(), dy.stride(0), g, u,
                                            g_stride, u_stride, out.data_ptr<value_t>(), R, I);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("swiglu_backward_out", TORCH_FN(swiglu_backward_out_cuda));
}

}  // namespace argon::cuda
