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

namespace argon::hopper_ops {
namespace {

using at::Tensor;

constexpr int64_t kAlign = 16;  // TMA: 16-byte aligned base addresses and row strides

void check_matrix_dtype(const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, name,
                    " must be float16 or bfloat16, got ", t.scalar_type());
}

void check_plan_vector(const Tensor& t, const char* name, int64_t size) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == size && t.scalar_type() == at::kInt, name,
                    " must be int32 of shape [", size, "] (the plan's), got ", t.scalar_type(),
                    " of shape ", t.sizes());
}

void check_same_device(const Tensor& t, const char* name, const Tensor& a) {
  TORCH_CHECK_VALUE(t.device() == a.device(), name, " is on ", t.device(), ", a on ", a.device(),
                    ": every tensor must be on one device");
}

// out's shape [R, N] from the inputs, after every check but out's.
std::vector<int64_t> check_inputs(const Tensor& a, const Tensor& w, const Tensor& offsets,
                                  const Tensor& counts, int64_t config) {
  TORCH_CHECK_VALUE(a.dim() == 2, "a must be [R, K], got shape ", a.sizes());
  TORCH_CHECK_VALUE(w.dim() == 3, "w must be [E, N, K], got shape ", w.sizes());
  check_matrix_dtype(a, "a");
  TORCH_CHECK_VALUE(w.scalar_type() == a.scalar_type(), "w must have a's dtype ",
                    a.scalar_type(), ", got ", w.scalar_type());
  TORCH_CHECK_VALUE(w.size(2) == a.size(1), "w's last dimension (K) must equal a's, got ",
                    w.size(2), " and ", a.size(1));
  TORCH_CHECK_VALUE(w.size(0) > 0 && w.size(0) <= std::numeric_limits<int32_t>::max(),
                    "w must hold between 1 and 2^31 - 1 experts, got ", w.size(0));
  TORCH_CHECK_VALUE(a.size(1) > 0 && a.size(1) % 8 == 0 && w.size(1) % 8 == 0,
                    "K (a's columns) and N (w's rows) must be multiples of 8 (16-byte rows), K "
                    "positive, "
                    "got K=", a.size(1), " N=", w.size(1));
  TORCH_CHECK_VALUE(w.size(1) <= std::numeric_limits<int32_t>::max() &&
                        a.size(1) <= std::numeric_limits<int32_t>::max(),
                    "N and K must fit in int32, got N=", w.size(1), " K=", a.size(1));
  check_plan_vector(offsets, "offsets", w.size(0) + 1);
  check_plan_vector(counts, "counts", w.size(0));
  TORCH_CHECK_VALUE(config >= 0 && config < ARGON_HOPPER_N_CONFIGS, "config must be in [0, ",
                    ARGON_HOPPER_N_CONFIGS, "), got ", config);
  check_same_device(w, "w", a);
  check_same_device(offsets, "offsets", a);
  check_same_device(counts, "counts", a);
  return {a.size(0), w.size(1)};
}

bool tma_ready(const Tensor& t) {
  return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlign == 0;
}

// t itself, or a dense copy at a fresh (aligned) address where TMA could not read it.
Tensor readable(const Tensor& t) {
  return tma_ready(t) ? t : t.clone(at::MemoryFormat::Contiguous);
}

void hopper_grouped_mm_out(const Tensor& a_in, const Tensor& w_in, const Tensor& offsets,
                           const Tensor& counts, int64_t config, const Tensor& out) {
  const auto shape = check_inputs(a_in, w_in, offsets, counts, config);
  TORCH_CHECK_VALUE(out.sizes() == at::IntArrayRef(shape) &&
                        out.scalar_type() == a_in.scalar_type(),
                    "out must be ", a_in.scalar_type(), " of shape ", at::IntArrayRef(shape),
                    ", got ", out.scalar_type(), " of shape ", out.sizes());
  check_same_device(out, "out", a_in);
  TORCH_CHECK_VALUE(tma_ready(out), "out must be contiguous with a 16-byte aligned address");
  check_no_overlap({{"out", &out}}, {{"a", &a_in}, {"w", &w_in}, {"offsets", &offsets},
                                     {"counts", &counts}});
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(a_in.device());
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  TORCH_CHECK_NOT_IMPLEMENTED(prop->major == 9 && prop->minor == 0,
                              "the Hopper grouped GEMM runs on compute capability 9.0 (sm_90a "
                              "code), this GPU is ", prop->major, ".", prop->minor);
  const Tensor a = readable(a_in), w = readable(w_in);
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
