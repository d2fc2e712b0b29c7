// The Hopper grouped GEMM (csrc/hopper/*.cu) as torch ops of the `argon` library:
//
//   hopper_grouped_mm(Tensor a, Tensor w, Tensor offsets, Tensor counts, int config) -> Tensor
//   hopper_grouped_mm_out(Tensor a, Tensor w, Tensor offsets, Tensor counts, int config,
//                         Tensor(a!) out) -> ()
//       a [R, K] (fp16 / bf16) rows grouped by expert as a plan lays them out, w [E, N, K] in
//       a's dtype, offsets [E + 1] and counts [E] int32 (the plan's): for every expert e,
//       out[offsets[e] + r] = a[offsets[e] + r] @ w[e]^T for r < counts[e] (fp32 accumulation,
//       rounded once to a's dtype). The functional form's other rows are zero; the _out form
//       leaves them as they were (the experts path's padding rows, never read). config: an index
//       of csrc/hopper/hopper_gemm.h's list (torch_argon/hopper/configs.py names them).
//
// The schemas are in every build; the CUDA kernel only where the Hopper unit was built
// (ARGON_WITH_HOPPER: CUTLASS's headers found and an sm_90 target asked for, setup.py), and it
// runs on compute capability 9.0 only. torch_argon/hopper says why not before calling (its
// `refusal`), and holds the fakes (torch.compile, opcheck). Every argument check raises a
// ValueError naming the argument, before any launch; the launch takes no host sync (the
// workspace comes from the caching allocator, its size from E alone), so CUDA graphs capture it.
#include <torch/library.h>

#if defined(ARGON_WITH_HOPPER)
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "checks.h"
#include "hopper/hopper_gemm.h"
#include "hopper/hopper_tensor_checks.h"

namespace argon::hopper_ops {
namespace {

using at::Tensor;

// out's shape [R, N] from the inputs, after every check but out's.
std::vector<int64_t> check_inputs(const Tensor& a, const Tensor& w, const Tensor& offsets,
                                  const Tensor& counts, int64_t config) {
  check_operands(a, w);
  check_plan_vector(offsets, "offsets", w.size(0) + 1);
  check_plan_vector(counts, "counts", w.size(0));
  TORCH_CHECK_VALUE(config >= 0 && config < ARGON_HOPPER_N_CONFIGS, "config must be in [0, ",
                    ARGON_HOPPER_N_CONFIGS, "), got ", config);
  check_same_device(w, "w", a);
  check_same_device(offsets, "offsets", a);
  check_same_device(counts, "counts", a);
  return {a.size(0), w.size(1)};
}

void hopper_grouped_mm_out(const Tensor& a_in, const Tensor& w_in, const Tensor& offsets,
                           const Tensor& counts, int64_t config, const Tensor& out) {
  const auto shape = check_inputs(a_in, w_in, offsets, counts, config);
  check_out(out, shape, a_in);
  check_no_overlap({{"out", &out}}, {{"a", &a_in}, {"w", &w_in}, {"offsets", &offsets},
                                     {"counts", &counts}});
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(a_in.device());
  const cudaDeviceProp* prop = sm90a_device("the Hopper grouped GEMM");
  const Tensor a = tma_readable(a_in), w = tma_readable(w_in);
  // the kernels index the plan vectors as dense int32 arrays (a strided view is copied)
  const Tensor offsets_dense = offsets.contiguous(), counts_dense = counts.contiguous();
  ArgonHopperGemm gemm{};
  gemm.dtype = a.scalar_type() == at::kBFloat16 ? ARGON_HOPPER_BF16 : ARGON_HOPPER_FP16;
  gemm.config = static_cast<int>(config);
  gemm.a = a.data_ptr();
  gemm.b = w.data_ptr();
  gemm.d = out.data_ptr();
  gemm.offsets = offsets_dense.data_ptr<int32_t>();
  gemm.counts = counts_dense.data_ptr<int32_t>();
  gemm.n_groups = static_cast<int>(w.size(0));
  gemm.rows = a.size(0);
  gemm.n = static_cast<int>(w.size(1));
  gemm.k = static_cast<int>(a.size(1));
  gemm.sm_count = prop->multiProcessorCount;
  gemm.workspace_bytes =
      argon_hopper_workspace_bytes(gemm.dtype, gemm.config, gemm.n_groups, gemm.sm_count);
  const Tensor workspace =
      at::empty({static_cast<int64_t>(gemm.workspace_bytes)}, a.options().dtype(at::kByte));
  gemm.workspace = workspace.data_ptr();
  gemm.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
  char err[512] = "";
  const int failed = argon_hopper_grouped_gemm(&gemm, err, sizeof err);
  TORCH_CHECK(failed == 0, "hopper_grouped_mm: ", err);
}

Tensor hopper_grouped_mm(const Tensor& a, const Tensor& w, const Tensor& offsets,
                         const Tensor& counts, int64_t config) {
  const auto shape = check_inputs(a, w, offsets, counts, config);
  Tensor out = at::zeros(shape, a.options());
  hopper_grouped_mm_out(a, w, offsets, counts, config, out);
  return out;
}

}  // namespace
}  // namespace argon::hopper_ops

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("hopper_grouped_mm", TORCH_FN(argon::hopper_ops::hopper_grouped_mm));
  m.impl("hopper_grouped_mm_out", TORCH_FN(argon::hopper_ops::hopper_grouped_mm_out));
}
#endif  // ARGON_WITH_HOPPER

#if !defined(ARGON_TEST_MODULE)
TORCH_LIBRARY_FRAGMENT(argon, m) {
  m.def("hopper_grouped_mm(Tensor a, Tensor w, Tensor offsets, Tensor counts, int config) "
        "-> Tensor");
  m.def("hopper_grouped_mm_out(Tensor a, Tensor w, Tensor offsets, Tensor counts, int config, "
        "Tensor(a!) out) -> ()");
}
#endif
