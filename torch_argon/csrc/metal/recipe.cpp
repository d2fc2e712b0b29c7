#include "metal/recipe.h"

#include "metal/bind.h"

#include <algorithm>
#include <stdexcept>

namespace argon::metal {
namespace {

uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

bool aligned(const BufArg& b, uint64_t bytes) { return b.offset % bytes == 0; }

uint32_t dtype_bytes(uint32_t dtype) { return dtype == ARGON_F32 ? 4 : 2; }

}  // namespace

PlanLaunch plan_launch(int64_t T, int64_t K, int64_t E, int64_t tile_m, int64_t r_max,
                       bool ids_64bit, ArgonDtype weight_dtype) {
  if (E < 1 || E > ARGON_PLAN_MAX_EXPERTS) {
    throw std::invalid_argument("moe_plan on Metal supports 1 <= n_expert <= " +
                                std::to_string(ARGON_PLAN_MAX_EXPERTS) + ", got " +
                                std::to_string(E));
  }
  if (r_max > INT32_MAX || T * K > INT32_MAX) {
    throw std::invalid_argument("moe_plan on Metal: T*K plus padding must fit int32 rows");
  }
  // The largest block whose packed sub-block counters (8 bits per expert per 32 entries) fit;
  // ARGON_PLAN_MIN_BLOCK fits every E up to the limit (plan_params.h asserts it).
  uint32_t block = ARGON_PLAN_MAX_BLOCK;
  while (uint64_t(E) * (block / 128) > ARGON_PLAN_PACKED_WORDS && block > ARGON_PLAN_MIN_BLOCK) {
    block /= 2;
  }
  PlanLaunch L;
  ArgonPlanParams& p = L.params;
  p.n_entries = static_cast<uint32_t>(T * K);
  p.top_k = static_cast<uint32_t>(std::max<int64_t>(K, 1));
  p.n_expert = static_cast<uint32_t>(E);
  p.tile_m = static_cast<uint32_t>(tile_m);
  p.block = block;
  p.n_blocks = ceil_div(p.n_entries, block);
  p.r_max = static_cast<uint32_t>(r_max);
  p.n_tiles = static_cast<uint32_t>(r_max / tile_m);
  p.ids_64bit = ids_64bit ? 1 : 0;
  p.weight_dtype = weight_dtype;
  p.scan_threads = std::min<uint32_t>(ARGON_PLAN_SCAN_THREADS, ceil_div(E, 32) * 32);
  L.scratch_ints = std::max<uint64_t>(1, uint64_t(p.n_blocks) * (E + 1));
  return L;
}

void encode_plan(Encoder& enc, const PlanLaunch& L, const PlanBuffers& b) {
  const ArgonPlanParams& p = L.params;
  if (p.n_blocks > 0) {
    launch(enc, "plan_hist", {{"ids", b.ids}, {"p", p}, {"block_counts", b.scratch}},
           {p.n_blocks, 1, 1}, {p.block, 1, 1});
  }
  launch(enc, "plan_scan",
         {{"p", p}, {"block_counts", b.scratch}, {"counts", b.counts}, {"offsets", b.offsets},
          {"sorted_token", b.sorted_token}, {"sorted_weight", b.sorted_weight},
          {"tile_expert", b.tile_expert}, {"meta", b.meta}},
         {1, 1, 1}, {p.scan_threads, 1, 1});
  if (p.n_blocks > 0) {
    launch(enc, "plan_place",
           {{"ids", b.ids}, {"weights", b.weights}, {"p", p}, {"block_counts", b.scratch},
            {"offsets", b.offsets}, {"sorted_token", b.sorted_token},
            {"sorted_weight", b.sorted_weight}, {"pos", b.pos}},
           {p.n_blocks, 1, 1}, {p.block, 1, 1});
  }
}

const char* gather_kernel(const ArgonGatherParams& p, const GatherBuffers& b) {
  if (p.cols % 4 == 0) {
    if (p.src_dtype != ARGON_F32 && p.dst_dtype == p.src_dtype && aligned(b.x, 8) &&
        aligned(b.out, 8)) {
      return "gather_copy16";
    }
    if (p.src_dtype == ARGON_F32 && aligned(b.x, 16) && aligned(b.out, 4 * dtype_bytes(p.dst_dtype))) {
      return "gather_from_f32";
    }
  }
  return "gather_any";
}

void encode_gather(Encoder& enc, const ArgonGatherParams& p, const GatherBuffers& b) {
  if (p.rows == 0 || p.cols == 0) return;
  const char* kernel = gather_kernel(p, b);
  const uint32_t per_thread = std::string(kernel) == "gather_any" ? 1 : 4;
  launch(enc, kernel, {{"x", b.x}, {"sorted_token", b.sorted_token}, {"xs", b.out}, {"p", p}},
         {p.rows, ceil_div(p.cols / per_thread, ARGON_ELEMWISE_THREADS), 1},
         {ARGON_ELEMWISE_THREADS, 1, 1});
}

void encode_combine(Encoder& enc, const ArgonCombineParams& p, const CombineBuffers& b) {
  if (p.n_tokens == 0 || p.cols == 0) return;
  launch(enc, "combine",
         {{"y", b.y}, {"pos", b.pos}, {"weights", b.weights}, {"shared_out", b.shared},
          {"residual", b.residual}, {"out", b.out}, {"p", p}},
         {p.n_tokens, ceil_div(p.cols, ARGON_ELEMWISE_THREADS), 1}, {ARGON_ELEMWISE_THREADS, 1, 1});
}

void encode_swiglu(Encoder& enc, const ArgonSwigluParams& p, const SwigluBuffers& b) {
  if (p.rows == 0 || p.cols == 0) return;
  launch(enc, "swiglu", {{"gate", b.gate}, {"up", b.up}, {"out", b.out}, {"p", p}},
         {p.rows, ceil_div(p.cols, ARGON_ELEMWISE_THREADS), 1}, {ARGON_ELEMWISE_THREADS, 1, 1});
}

void encode_swiglu_backward(Encoder& enc, const ArgonSwigluBackwardParams& p,
                            const SwigluBackwardBuffers& b) {
  if (p.rows == 0 || p.cols == 0) return;
  launch(enc, "swiglu_backward",
         {{"grad_out", b.grad_out}, {"gate", b.gate}, {"up", b.up}, {"out", b.out}, {"p", p}},
         {p.rows, ceil_div(p.cols, ARGON_ELEMWISE_THREADS), 1}, {ARGON_ELEMWISE_THREADS, 1, 1});
}

const char* moe_mm_kernel(const ArgonMoeMmParams& p) {
  // moe_mm_simd's 32-row blocks must not straddle plan tiles.
  return p.tile_m >= ARGON_MM_TILE ? "moe_mm_simd" : "moe_mm_rows";
}

void encode_moe_mm(Encoder& enc, const ArgonMoeMmParams& p, const MoeMmBuffers& b) {
  if (p.rows == 0 || p.n == 0) return;
  const char* kernel = moe_mm_kernel(p);
  const bool simd = std::string(kernel) == "moe_mm_simd";
  launch(enc, kernel,
         {{"xs", b.xs}, {"w", b.w}, {"tile_expert", b.tile_expert}, {"out", b.out}, {"p", p}},
         simd ? Size3{p.rows / ARGON_MM_TILE, ceil_div(p.n, ARGON_MM_TILE), 1}
              : Size3{p.rows, ceil_div(p.n, ARGON_ELEMWISE_THREADS), 1},
         simd ? Size3{ARGON_MM_THREADS, 1, 1} : Size3{ARGON_ELEMWISE_THREADS, 1, 1});
}

void encode_moe_mm_weight_grad(Encoder& enc, const ArgonMoeMmWeightGradParams& p,
                               const MoeMmWeightGradBuffers& b) {
  // No early exit for R = 0: the output (zeros then) is written whatever the rows.
  if (p.n_expert == 0 || p.n == 0 || p.kd == 0) return;
  launch(enc, "moe_mm_weight_grad",
         {{"xs", b.xs}, {"grad_out", b.grad_out}, {"tile_expert", b.tile_expert}, {"out", b.out},
          {"p", p}},
         {ceil_div(p.kd, ARGON_ELEMWISE_THREADS), p.n, p.n_expert}, {ARGON_ELEMWISE_THREADS, 1, 1});
}

const char* dequantize_kernel(uint32_t qtype) {
  switch (qtype) {
#define ARGON_DEQUANTIZE_NAME(lower, UPPER, id, elems, bytes) \
  case id: return "dequantize_" #lower;
    ARGON_QUANT_FORMATS(ARGON_DEQUANTIZE_NAME)
#undef ARGON_DEQUANTIZE_NAME
    default: return nullptr;
  }
}

const char* moe_qmm_kernel(uint32_t qtype) {
  switch (qtype) {
#define ARGON_MOE_QMM_NAME(lower, UPPER, id, elems, bytes) \
  case id: return "moe_qmm_" #lower;
    ARGON_QUANT_FORMATS(ARGON_MOE_QMM_NAME)
#undef ARGON_MOE_QMM_NAME
    default: return nullptr;
  }
}

namespace {
const char* quant_kernel_or_throw(const char* kernel, uint32_t qtype) {
  if (kernel == nullptr) {
    throw std::invalid_argument("no Metal kernel for GGML type " + std::to_string(qtype));
  }
  return kernel;
}
}  // namespace

void encode_dequantize(Encoder& enc, uint32_t qtype, const ArgonDequantParams& p,
                       const DequantizeBuffers& b) {
  const char* kernel = quant_kernel_or_throw(dequantize_kernel(qtype), qtype);
  const uint64_t chunks = uint64_t(p.rows) * p.chunks_per_row;
  if (chunks == 0) return;
  const uint64_t groups = (chunks + ARGON_DQ_THREADS - 1) / ARGON_DQ_THREADS;
  if (groups > UINT32_MAX) throw std::invalid_argument("dequantize on Metal: too many blocks");
  launch(enc, kernel, {{"w", b.w}, {"out", b.out}, {"p", p}},
         {static_cast<uint32_t>(groups), 1, 1}, {ARGON_DQ_THREADS, 1, 1});
}

void encode_moe_qmm(Encoder& enc, uint32_t qtype, const ArgonMoeQmmParams& p,
                    const MoeQmmBuffers& b) {
  const char* kernel = quant_kernel_or_throw(moe_qmm_kernel(qtype), qtype);
  if (p.rows == 0 || p.n == 0) return;
  launch(enc, kernel,
         {{"xs", b.xs}, {"w", b.w}, {"tile_expert", b.tile_expert}, {"out", b.out}, {"p", p}},
         {ceil_div(p.rows, ARGON_QMM_BM), ceil_div(p.n, ARGON_QMM_BN), 1},
         {ARGON_QMM_THREADS, 1, 1});
}

}  // namespace argon::metal
