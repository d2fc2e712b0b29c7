// The padded Hopper GEMM (csrc/hopper/hopper_padded_*.cu) as torch ops of the `argon` library:
//
//   hopper_padded_mm(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config) -> Tensor
//   hopper_padded_mm_out(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config,
//                        Tensor(a!) out) -> ()
//       a [R, K] (fp16 / bf16) rows laid out by a plan of tile_m 128 (R = 128 * tiles),
//       w [E, N, K] in a's dtype, tile_expert [R / 128] and meta [4] int32 (the plan's): for
//       every used tile m (m < meta[1], the plan's n_tiles), out[128 m + r] = a[128 m + r] @
//       w[tile_expert[m]]^T for r < 128 (fp32 accumulation, rounded once to a's dtype): every
//       row of a used tile, padding rows included. The functional form's other rows are zero;
//       the _out form leaves them as they were. A used tile whose tile_expert is outside [0, E)
//       (no plan makes one) is written with zeros; a meta[1] outside [0, R / 128] is clipped to
//       it. config: an index of csrc/hopper/hopper_padded_gemm.h's list
//       (torch_argon/hopper/configs.py PADDED_CONFIGS names them).
//
//   hopper_padded_act_mm(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config,
//                        str activation="silu") -> Tensor
//   hopper_padded_act_mm_out(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config,
//                            str activation, Tensor(a!) out) -> ()
//       The gate/up GEMM with the activation in its epilogue: w [E, 2I, K] is a gate/up stack
//       with gate and up rows interleaved in blocks of 8 (torch_argon/hopper/padded_ops.py
//       interleave_gate_up; 2I a multiple of 16), out h [R, I]: for every row r of a used tile,
//       h[r] = swiglu(g, u) where g and u are the hopper_padded_mm rows of the original stack,
//       rounded to a's dtype (activation "silu", "gelu" or "gelu_tanh", swiglu's formula and
//       rounding: the bits of hopper_padded_mm followed by swiglu). Other rows as above (zero,
//       or as they were for the _out form); tile_expert, meta and config as above.
//
// The schemas are in every build; the CUDA kernel only where the Hopper units were built
// (ARGON_WITH_HOPPER, as the grouped GEMM's), on compute capability 9.0 only.
// torch_argon/hopper/padded_ops.py says why not before calling and holds the fakes. Every
// argument check raises a ValueError naming the argument, before any launch; the launch takes no
// host sync (no workspace: the used-tile count and tile_expert are read on the device), so CUDA
// graphs capture it.
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
#include "hopper/hopper_padded_gemm.h"
#include "hopper/hopper_tensor_checks.h"
#include "shared/plan_params.h"

namespace argon::hopper_ops {
namespace {

using at::Tensor;

// out's shape [R, N] from the inputs, after every check but out's.
std::vector<int64_t> check_padded_inputs(const Tensor& a, const Tensor& w,
                                         const Tensor& tile_expert, const Tensor& meta,
                                         int64_t config) {
  check_operands(a, w);
  TORCH_CHECK_VALUE(tile_expert.dim() == 1 && tile_expert.scalar_type() == at::kInt,
                    "tile_expert must be the plan's int32 [R / 128], got ",
                    tile_expert.scalar_type(), " of shape ", tile_expert.sizes());
  TORCH_CHECK_VALUE(a.size(0) == tile_expert.size(0) * ARGON_HOPPER_PADDED_TILE_M,
                    "a must have 128 rows per tile of tile_expert (a plan made with tile_m = 128), "
                    "got ", a.size(0), " rows and ", tile_expert.size(0), " tiles");
  TORCH_CHECK_VALUE(a.size(0) <= std::numeric_limits<int32_t>::max(),
                    "a's rows must fit in int32, got ", a.size(0));
  check_plan_vector(meta, "meta", ARGON_META_SIZE);
  TORCH_CHECK_VALUE(config >= 0 && config < ARGON_HOPPER_PADDED_N_CONFIGS, "config must be in [0, ",
                    ARGON_HOPPER_PADDED_N_CONFIGS, "), got ", config);
  check_same_device(w, "w", a);
  check_same_device(tile_expert, "tile_expert", a);
  check_same_device(meta, "meta", a);
  return {a.size(0), w.size(1)};
}

// Both GEMMs' launch once every input check has passed and out's shape is known: out checked
// against the inputs, the C entry's argument block (a and w as TMA reads them, the plan's vectors
// dense), the run on the current stream. entry: argon_hopper_padded_gemm or _act_gemm.
void launch(const Tensor& a_in, const Tensor& w_in, const Tensor& tile_expert, const Tensor& meta,
            int64_t config, int activation, const std::vector<int64_t>& shape, const Tensor& out,
            int (*entry)(const ArgonHopperPaddedGemm*, char*, int), const char* kernel,
            const char* op) {
  check_out(out, shape, a_in);
  check_no_overlap({{"out", &out}}, {{"a", &a_in}, {"w", &w_in}, {"tile_expert", &tile_expert},
                                     {"meta", &meta}});
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(a_in.device());
  const cudaDeviceProp* prop = sm90a_device(kernel);
  const Tensor a = tma_readable(a_in), w = tma_readable(w_in);
  // the kernel reads the plan vectors as dense int32 arrays (a strided view is copied)
  const Tensor tiles_dense = tile_expert.contiguous(), meta_dense = meta.contiguous();
  ArgonHopperPaddedGemm gemm{};
  gemm.dtype = a.scalar_type() == at::kBFloat16 ? ARGON_HOPPER_BF16 : ARGON_HOPPER_FP16;
  gemm.config = static_cast<int>(config);
  gemm.a = a.data_ptr();
  gemm.b = w.data_ptr();
  gemm.d = out.data_ptr();
  gemm.tile_expert = tiles_dense.data_ptr<int32_t>();
  gemm.used_tiles = meta_dense.data_ptr<int32_t>() + ARGON_META_N_TILES;
  gemm.max_tiles_m = static_cast<int>(tile_expert.size(0));
  gemm.n_experts = static_cast<int>(w.size(0));
  gemm.n = static_cast<int>(w.size(1));
  gemm.k = static_cast<int>(a.size(1));
  gemm.sm_count = prop->multiProcessorCount;
  gemm.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
  gemm.activation = activation;
  char err[512] = "";
  const int failed = entry(&gemm, err, sizeof err);
  TORCH_CHECK(failed == 0, op, ": ", err);
}

void hopper_padded_mm_out(const Tensor& a, const Tensor& w, const Tensor& tile_expert,
                          const Tensor& meta, int64_t config, const Tensor& out) {
  const auto shape = check_padded_inputs(a, w, tile_expert, meta, config);
  launch(a, w, tile_expert, meta, config, 0, shape, out, argon_hopper_padded_gemm,
         "the padded Hopper GEMM", "hopper_padded_mm");
}

// h's shape [R, I] from the inputs (w the interleaved gate/up stack [E, 2I, K]), after every
// check but out's; the activation's code in act.
std::vector<int64_t> check_act_inputs(const Tensor& a, const Tensor& w, const Tensor& tile_expert,
                                      const Tensor& meta, int64_t config,
                                      c10::string_view activation, int* act) {
  auto shape = check_padded_inputs(a, w, tile_expert, meta, config);
  TORCH_CHECK_VALUE(w.size(1) % 16 == 0,
                    "w must be the interleaved gate/up stack [E, 2I, K] with I a multiple of 8 "
                    "(gate and up rows in blocks of 8), got ", w.size(1), " rows");
  *act = argon::check_activation(activation);
  shape[1] = w.size(1) / 2;
  return shape;
}

void hopper_padded_act_mm_out(const Tensor& a, const Tensor& w, const Tensor& tile_expert,
                              const Tensor& meta, int64_t config, c10::string_view activation,
                              const Tensor& out) {
  int act = 0;
  const auto shape = check_act_inputs(a, w, tile_expert, meta, config, activation, &act);
  launch(a, w, tile_expert, meta, config, act, shape, out, argon_hopper_padded_act_gemm,
         "the padded Hopper gate/up GEMM", "hopper_padded_act_mm");
}

Tensor hopper_padded_act_mm(const Tensor& a, const Tensor& w, const Tensor& tile_expert,
                            const Tensor& meta, int64_t config, c10::string_view activation) {
  int act = 0;
  const auto shape = check_act_inputs(a, w, tile_expert, meta, config, activation, &act);
  Tensor out = at::zeros(shape, a.options());
  hopper_padded_act_mm_out(a, w, tile_expert, meta, config, activation, out);
  return out;
}

Tensor hopper_padded_mm(const Tensor& a, const Tensor& w, const Tensor& tile_expert,
                        const Tensor& meta, int64_t config) {
  const auto shape = check_padded_inputs(a, w, tile_expert, meta, config);
  Tensor out = at::zeros(shape, a.options());
  hopper_padded_mm_out(a, w, tile_expert, meta, config, out);
  return out;
}

}  // namespace
}  // namespace argon::hopper_ops

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("hopper_padded_mm", TORCH_FN(argon::hopper_ops::hopper_padded_mm));
  m.impl("hopper_padded_mm_out", TORCH_FN(argon::hopper_ops::hopper_padded_mm_out));
  m.impl("hopper_padded_act_mm", TORCH_FN(argon::hopper_ops::hopper_padded_act_mm));
  m.impl("hopper_padded_act_mm_out", TORCH_FN(argon::hopper_ops::hopper_padded_act_mm_out));
}
#endif  // ARGON_WITH_HOPPER

#if !defined(ARGON_TEST_MODULE)
TORCH_LIBRARY_FRAGMENT(argon, m) {
  m.def("hopper_padded_mm(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config) "
        "-> Tensor");
  m.def("hopper_padded_mm_out(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config, "
        "Tensor(a!) out) -> ()");
  m.def("hopper_padded_act_mm(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, int config, "
        "str activation=\"silu\") -> Tensor");
  m.def("hopper_padded_act_mm_out(Tensor a, Tensor w, Tensor tile_expert, Tensor meta, "
        "int config, str activation, Tensor(a!) out) -> ()");
}
#endif
