// The mixed-input Hopper GEMM (csrc/hopper/hopper_mixed_gemm.cuh: GGUF weights of 32-value
// affine groups, repacked, converted in registers) as torch ops of the `argon` library
// (bench/quant_mixed_notes.md):
//
//   hopper_mixed_mm(Tensor x, Tensor codes, Tensor scales, Tensor zeros, Tensor tile_expert,
//                   Tensor meta) -> Tensor
//   hopper_mixed_mm_out(Tensor x, Tensor codes, Tensor scales, Tensor zeros,
//                       Tensor tile_expert, Tensor meta, Tensor(a!) out) -> ()
//       x [R, K] bf16 rows laid out by a plan of tile_m t = 128 or 64 (R = t * tiles); codes uint8
//       [E, K / 16, N / 16, 128] (4-bit codes) or [E, K / 16, N / 16, 256] (8-bit): 16 x 16
//       blocks of codes in the kernel's reordered order, scales and zeros bf16
//       [E, K / 64, N, 2] (torch_argon/quant/mixed_repack.py's MixedWeights); tile_expert
//       [R / t] and meta [4] int32 (the plan's): for every used tile m (m < meta[1]),
//       out[t m + r] = x[t m + r] @ W[tile_expert[m]]^T for r < t, W = mixed_dequantize's
//       bf16 weights (fp32 accumulation, rounded once to bf16). The functional form's other rows
//       are zero; the _out form leaves them as they were. K a multiple of 64, N of 16 (by
//       construction: N = 16 * codes.size(2)).
//
// The schemas are in every build; the CUDA kernel only where the Hopper units were built
// (ARGON_WITH_HOPPER), on compute capability 9.0 only. torch_argon/hopper/mixed_ops.py holds the
// wrapper and the fakes. Every argument check raises a ValueError naming the argument, before
// any launch; no host sync (CUDA graphs capture the launch).
#include <torch/library.h>

#if defined(ARGON_WITH_HOPPER)
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "checks.h"
#include "hopper/hopper_mixed_gemm.h"
#include "hopper/hopper_padded_gemm.h"
#include "hopper/hopper_tensor_checks.h"
#include "shared/plan_params.h"

namespace argon::hopper_ops {
namespace {

using at::Tensor;

void check_pairs(const Tensor& t, const char* name, int64_t e, int64_t k, int64_t n) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kBFloat16 && t.dim() == 4 && t.size(0) == e &&
                        t.size(1) == k / 64 && t.size(2) == n && t.size(3) == 2,
                    name, " must be bfloat16 [E, K / 64, N, 2] = [", e, ", ", k / 64, ", ", n,
                    ", 2] (mixed_repack's), got ", t.scalar_type(), " of shape ", t.sizes());
}

// The plan's tile_m (the kernel's token tile): x's rows per tile of tile_expert where that is 128
// or 64 (128 where there are no tiles), else 0.
int64_t tile_rows(const Tensor& x, const Tensor& tile_expert) {
  const int64_t tiles = tile_expert.size(0), rows = x.size(0);
  if (tiles == 0) return rows == 0 ? 128 : 0;
  for (const int64_t tile : {128, 64})
    if (rows == tile * tiles) return tile;
  return 0;
}

// out's shape [R, N] from the inputs, after every check but out's.
std::vector<int64_t> check_mixed_inputs(const Tensor& x, const Tensor& codes,
                                        const Tensor& scales, const Tensor& zeros,
                                        const Tensor& tile_expert, const Tensor& meta) {
  TORCH_CHECK_VALUE(x.dim() == 2 && x.scalar_type() == at::kBFloat16,
                    "x must be bfloat16 [R, K], got ", x.scalar_type(), " of shape ", x.sizes());
  const int64_t k = x.size(1);
  TORCH_CHECK_VALUE(k > 0 && k % 64 == 0 && k <= std::numeric_limits<int32_t>::max(),
                    "K (x's columns) must be a positive multiple of 64 (the GEMM's K tile), got ",
                    k);
  TORCH_CHECK_VALUE(codes.dim() == 4 && codes.scalar_type() == at::kByte &&
                        codes.size(1) == k / 16 && (codes.size(3) == 128 || codes.size(3) == 256),
                    "codes must be uint8 [E, K / 16, N / 16, 128] (4-bit) or "
                    "[E, K / 16, N / 16, 256] (8-bit) with K = x's columns (", k, "), got ",
                    codes.scalar_type(), " of shape ", codes.sizes());
  const int64_t e = codes.size(0), n = 16 * codes.size(2);
  TORCH_CHECK_VALUE(e > 0 && e <= std::numeric_limits<int32_t>::max(),
                    "codes must hold between 1 and 2^31 - 1 experts, got ", e);
  TORCH_CHECK_VALUE(n > 0 && n <= std::numeric_limits<int32_t>::max(),
                    "N (16 * codes.size(2), its blocks of 16 rows) must be between 1 and "
                    "2^31 - 1, got ", n);
  check_pairs(scales, "scales", e, k, n);
  check_pairs(zeros, "zeros", e, k, n);
  TORCH_CHECK_VALUE(tile_expert.dim() == 1 && tile_expert.scalar_type() == at::kInt,
                    "tile_expert must be the plan's int32 [R / tile_m], got ",
                    tile_expert.scalar_type(), " of shape ", tile_expert.sizes());
  TORCH_CHECK_VALUE(tile_rows(x, tile_expert) != 0,
                    "x must have 128 or 64 rows per tile of tile_expert (a plan made with tile_m = "
                    "128 or 64), got ", x.size(0), " rows and ", tile_expert.size(0), " tiles");
  TORCH_CHECK_VALUE(x.size(0) <= std::numeric_limits<int32_t>::max(),
                    "x's rows must fit in int32, got ", x.size(0));
  check_plan_vector(meta, "meta", ARGON_META_SIZE);
  check_same_device(codes, "codes", x);
  check_same_device(scales, "scales", x);
  check_same_device(zeros, "zeros", x);
  check_same_device(tile_expert, "tile_expert", x);
  check_same_device(meta, "meta", x);
  return {x.size(0), n};
}

void hopper_mixed_mm_out(const Tensor& x_in, const Tensor& codes_in, const Tensor& scales_in,
                             const Tensor& zeros_in, const Tensor& tile_expert,
                             const Tensor& meta, const Tensor& out) {
  const auto shape = check_mixed_inputs(x_in, codes_in, scales_in, zeros_in, tile_expert, meta);
  check_out(out, shape, x_in);
  check_no_overlap({{"out", &out}}, {{"x", &x_in}, {"codes", &codes_in}, {"scales", &scales_in},
                                     {"zeros", &zeros_in}, {"tile_expert", &tile_expert},
                                     {"meta", &meta}});
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x_in.device());
  const cudaDeviceProp* prop = sm90a_device("the mixed-input Hopper GEMM");
  const Tensor x = tma_readable(x_in), codes = tma_readable(codes_in);
  const Tensor scales = tma_readable(scales_in), zeros = tma_readable(zeros_in);
  const Tensor tiles_dense = tile_expert.contiguous(), meta_dense = meta.contiguous();
  ArgonHopperMixedGemm gemm{};
  gemm.x = x.data_ptr();
  gemm.codes = codes.data_ptr();
  gemm.scales = scales.data_ptr();  // bf16 pairs = the kernel's uint32 (little-endian)
  gemm.zeros = zeros.data_ptr();
  gemm.d = out.data_ptr();
  gemm.tile_expert = tiles_dense.data_ptr<int32_t>();
  gemm.used_tiles = meta_dense.data_ptr<int32_t>() + ARGON_META_N_TILES;
  gemm.max_tiles_m = static_cast<int>(tile_expert.size(0));
  gemm.n_experts = static_cast<int>(codes.size(0));
  gemm.n = static_cast<int>(16 * codes.size(2));
  gemm.k = static_cast<int>(x.size(1));
  gemm.code_bits = codes.size(3) == 256 ? 8 : 4;
  gemm.tile_rows = static_cast<int>(tile_rows(x, tile_expert));
  gemm.sm_count = prop->multiProcessorCount;
  gemm.stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  char err[512] = "";
  const int failed = argon_hopper_mixed_gemm(&gemm, err, sizeof err);
  TORCH_CHECK(failed == 0, "hopper_mixed_mm: ", err);
}

Tensor hopper_mixed_mm(const Tensor& x, const Tensor& codes, const Tensor& scales,
                       const Tensor& zeros, const Tensor& tile_expert, const Tensor& meta) {
  const auto shape = check_mixed_inputs(x, codes, scales, zeros, tile_expert, meta);
  Tensor out = at::zeros(shape, x.options());
  hopper_mixed_mm_out(x, codes, scales, zeros, tile_expert, meta, out);
  return out;
}

}  // namespace
}  // namespace argon::hopper_ops

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("hopper_mixed_mm", TORCH_FN(argon::hopper_ops::hopper_mixed_mm));
  m.impl("hopper_mixed_mm_out", TORCH_FN(argon::hopper_ops::hopper_mixed_mm_out));
}
#endif  // ARGON_WITH_HOPPER

#if !defined(ARGON_TEST_MODULE)
TORCH_LIBRARY_FRAGMENT(argon, m) {
  m.def("hopper_mixed_mm(Tensor x, Tensor codes, Tensor scales, Tensor zeros, "
        "Tensor tile_expert, Tensor meta) -> Tensor");
  m.def("hopper_mixed_mm_out(Tensor x, Tensor codes, Tensor scales, Tensor zeros, "
        "Tensor tile_expert, Tensor meta, Tensor(a!) out) -> ()");
}
#endif
