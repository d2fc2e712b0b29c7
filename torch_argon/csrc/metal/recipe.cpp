#include "metal/recipe.h"

#include <algorithm>
#include <stdexcept>

namespace argon::metal {
namespace {

uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// One argument at a kernel index: a buffer, or a params struct passed by value (set_bytes).
void bind_arg(Encoder& enc, uint32_t index, const BufArg& buf) { enc.set_buffer(index, buf); }

template <typename Params>
void bind_arg(Encoder& enc, uint32_t index, const Params& p) {
  enc.set_bytes(index, &p, sizeof(Params));
}

// Binds the kernel's arguments at indices 0, 1, 2, ... in the order given, which must be the
// order of the kernel's parameter list in its .metal file.
template <typename... Args>
void bind_args(Encoder& enc, const Args&... args) {
  uint32_t index = 0;
  (bind_arg(enc, index++, args), ...);
}

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
  // The largest block whose packed sub-block counters (8 bits per expert per 32 entries) fit.
  uint32_t block = ARGON_PLAN_MAX_BLOCK;
  while (uint64_t(E) * (block / 128) > ARGON_PLAN_PACKED_WORDS) block /= 2;
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
    enc.set_kernel("mm_hist");
    bind_args(enc, b.ids, p, b.scratch);
    enc.dispatch({p.n_blocks, 1, 1}, {p.block, 1, 1});
  }
  enc.set_kernel("mm_scan");
  bind_args(enc, p, b.scratch, b.counts, b.offsets, b.sorted_token, b.sorted_weight,
            b.tile_expert, b.meta);
  enc.dispatch({1, 1, 1}, {p.scan_threads, 1, 1});
  if (p.n_blocks > 0) {
    enc.set_kernel("mm_place");
    bind_args(enc, b.ids, b.weights, p, b.scratch, b.offsets, b.sorted_token, b.sorted_weight,
              b.pos);
    enc.dispatch({p.n_blocks, 1, 1}, {p.block, 1, 1});
  }
}

const char* gather_kernel(const ArgonGatherParams& p, const GatherBuffers& b) {
  if (p.cols % 4 == 0) {
    if (p.src_dtype != ARGON_F32 && p.dst_dtype == p.src_dtype && aligned(b.x, 8) &&
        aligned(b.out, 8)) {
      return "mm_gather_h";
    }
    if (p.src_dtype == ARGON_F32 && aligned(b.x, 16) && aligned(b.out, 4 * dtype_bytes(p.dst_dtype))) {
      return "mm_gather_f";
    }
  }
  return "mm_gather_any";
}

void encode_gather(Encoder& enc, const ArgonGatherParams& p, const GatherBuffers& b) {
  if (p.rows == 0 || p.cols == 0) return;
  const char* kernel = gather_kernel(p, b);
  const uint32_t per_thread = std::string(kernel) == "mm_gather_any" ? 1 : 4;
  enc.set_kernel(kernel);
  bind_args(enc, b.x, b.sorted_token, b.out, p);
  enc.dispatch({p.rows, ceil_div(p.cols / per_thread, ARGON_ELEMWISE_THREADS), 1},
               {ARGON_ELEMWISE_THREADS, 1, 1});
}

void encode_combine(Encoder& enc, const ArgonCombineParams& p, const CombineBuffers& b) {
  if (p.n_tokens == 0 || p.cols == 0) return;
  enc.set_kernel("mm_combine");
  bind_args(enc, b.y, b.pos, b.weights, b.shared, b.residual, b.out, p);
  enc.dispatch({p.n_tokens, ceil_div(p.cols, ARGON_ELEMWISE_THREADS), 1},
               {ARGON_ELEMWISE_THREADS, 1, 1});
}

void encode_swiglu(Encoder& enc, const ArgonSwigluParams& p, const SwigluBuffers& b) {
  if (p.rows == 0 || p.cols == 0) return;
  enc.set_kernel("swiglu_h");
  bind_args(enc, b.gate, b.up, b.out, p);
  enc.dispatch({p.rows, ceil_div(p.cols, ARGON_ELEMWISE_THREADS), 1},
               {ARGON_ELEMWISE_THREADS, 1, 1});
}

const char* moe_mm_kernel(const ArgonMoeMmParams& p) {
  // moe_mm_simd's 32-row blocks must not straddle plan tiles.
  return p.tile_m >= ARGON_MM_TILE ? "moe_mm_simd" : "moe_mm_rows";
}

void encode_moe_mm(Encoder& enc, const ArgonMoeMmParams& p, const MoeMmBuffers& b) {
  if (p.rows == 0 || p.n == 0) return;
  const char* kernel = moe_mm_kernel(p);
  enc.set_kernel(kernel);
  bind_args(enc, b.xs, b.w, b.tile_expert, b.out, p);
  if (std::string(kernel) == "moe_mm_simd") {
    enc.dispatch({p.rows / ARGON_MM_TILE, ceil_div(p.n, ARGON_MM_TILE), 1}, {ARGON_MM_THREADS, 1, 1});
  } else {
    enc.dispatch({p.rows, ceil_div(p.n, ARGON_ELEMWISE_THREADS), 1}, {ARGON_ELEMWISE_THREADS, 1, 1});
  }
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
  enc.set_kernel(kernel);
  bind_args(enc, b.w, b.out, p);
  enc.dispatch({static_cast<uint32_t>(groups), 1, 1}, {ARGON_DQ_THREADS, 1, 1});
}

void encode_moe_qmm(Encoder& enc, uint32_t qtype, const ArgonMoeQmmParams& p,
                    const MoeQmmBuffers& b) {
  const char* kernel = quant_kernel_or_throw(moe_qmm_kernel(qtype), qtype);
  if (p.rows == 0 || p.n == 0) return;
  enc.set_kernel(kernel);
  bind_args(enc, b.xs, b.w, b.tile_expert, b.out, p);
  enc.dispatch({ceil_div(p.rows, ARGON_QMM_BM), ceil_div(p.n, ARGON_QMM_BN), 1},
               {ARGON_QMM_THREADS, 1, 1});
}

}  // namespace argon::metal
