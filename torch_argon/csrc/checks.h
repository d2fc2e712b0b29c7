// Argument checks shared by every backend's _out kernel. Each failure names the argument and
// what was expected, and runs before any output is touched, so bad input never writes out of
// bounds. Value checks (ids in range) are the backends' own: the CPU raises, GPUs count.
#pragma once
#include <ATen/ATen.h>

#include <initializer_list>
#include <tuple>

#include "op_signatures.h"
#include "shared/plan_params.h"
#include "quant_formats.h"

namespace argon {

// Shapes of one plan; every size depends only on (T, K, E, tile_m).
struct PlanDims {
  int64_t T = 0, K = 0, E = 0, tile_m = 0;
  int64_t r_max = 0;    // upper bound on padded rows: round_up(T*K + min(E, T*K)*(tm-1), tm)
  int64_t n_tiles = 0;  // r_max / tile_m
  int64_t entries() const { return T * K; }
};

PlanDims plan_dims(int64_t T, int64_t K, int64_t E, int64_t tile_m);

// Allocates them, sized from d alone: `make(sizes, dtype)` makes one tensor (at::empty with the
// ids' options, or a backend's own allocator where the dispatcher round trip costs too much).
template <typename Make>
PlanOutputs make_plan_outputs(const PlanDims& d, Make&& make) {
  return {make({d.E}, at::kInt),     make({d.E + 1}, at::kInt),       make({d.r_max}, at::kInt),
          make({d.r_max}, at::kFloat), make({d.T, d.K}, at::kInt), make({d.n_tiles}, at::kInt),
          make({ARGON_META_SIZE}, at::kInt)};
}

// moe_plan: ids [T,K] int32/int64, weights [T,K] float, E >= 1, tile_m a power of two.
PlanDims check_plan_inputs(const at::Tensor& topk_ids, const at::Tensor& topk_weights,
                           int64_t n_expert, int64_t tile_m);
void check_plan_outputs(const PlanDims& d, const at::Tensor& topk_ids,
                        const at::Tensor& topk_weights, const at::Tensor& counts,
                        const at::Tensor& offsets, const at::Tensor& sorted_token,
                        const at::Tensor& sorted_weight, const at::Tensor& pos,
                        const at::Tensor& tile_expert, const at::Tensor& meta);

// moe_gather: x [T,H] float, sorted_token [R] int32, out [R,H] float.
void check_gather(const at::Tensor& x, const at::Tensor& sorted_token, const at::Tensor& out);

// moe_combine: y [R,H], pos [T,K] int32, weights [T,K], shared/residual [T,H], out [T,H].
void check_combine(const at::Tensor& y, const at::Tensor& pos, const at::Tensor& topk_weights,
                   const std::optional<at::Tensor>& shared,
                   const std::optional<at::Tensor>& residual, const at::Tensor& out);

// swiglu: gate and up [R,I] (or gate [R,2I] with no up), out [R,I], activation one of "silu",
// "gelu", "gelu_tanh". Returns the activation's code (ARGON_ACT_* of metal/swiglu_params.h).
int check_swiglu(const at::Tensor& gate, const std::optional<at::Tensor>& up,
                 c10::string_view activation, const at::Tensor& out);

// moe_mm: xs [R,Kd], w [E,N,Kd] (any strides), tile_expert [R/tile_m] int32, out [R,N].
void check_moe_mm(const at::Tensor& xs, const at::Tensor& w, const at::Tensor& tile_expert,
                  int64_t tile_m, const at::Tensor& out);

// The quantized op family. qtype: a ggml type id with kernels (quant_formats.h); w_q: uint8
// blocks [..., N, row_bytes] for rows of n_in values (n_in a multiple of the format's block).
const QuantFormat& check_qtype(int64_t qtype);
void check_quantized_weight(const at::Tensor& w_q, const QuantFormat& fmt, int64_t n_in,
                            int64_t dims, const char* shape);
// dequantize: w_q [..., N, row_bytes] (>= 2 dims), out float32 [..., N, n_in].
const QuantFormat& check_dequantize(const at::Tensor& w_q, int64_t qtype, int64_t n_in,
                                    const at::Tensor& out);
// moe_qmm's activation_quant: "none" (exact-dequant product) or "q8" (activations rounded to
// 8-bit blocks first: torch_argon/quant/activation_q8.py).
enum class ActivationQuant { kNone, kQ8 };
ActivationQuant check_activation_quant(c10::string_view activation_quant);
// The ValueError of a backend without q8 kernels (the same words as the Python backends').
void check_exact_activations_only(ActivationQuant activation_quant, const char* backend);
// moe_qmm: xs [R, n_in] float, w_q [E, N, row_bytes], tile_expert [R/tile_m] int32, out [R, N]
// of xs's dtype, activation_quant as above.
const QuantFormat& check_moe_qmm(const at::Tensor& xs, const at::Tensor& w_q, int64_t qtype,
                                 int64_t n_in, const at::Tensor& tile_expert, int64_t tile_m,
                                 c10::string_view activation_quant, const at::Tensor& out);

bool is_float_data(at::ScalarType t);  // fp32, fp16, bf16

// Overlap of caller-given buffers. Kernels read some outputs back (the plan reads its counts and
// offsets while it places rows), so an output aliasing another output or an input would turn
// into wrong values or writes outside every buffer; these checks run before anything is written.
struct NamedTensor {
  const char* name;
  const at::Tensor* tensor;  // nullptr or undefined: an absent optional input
};
// Whether two tensors may share bytes (same storage, overlapping byte ranges; conservative for
// strided tensors).
bool may_overlap(const at::Tensor& a, const at::Tensor& b);
// Raises a ValueError naming the pair if two outputs overlap, or an output overlaps an input,
// except the (output, input) pairs in `in_place` when the two are the same view (the in-place
// uses docs/contract.md allows).
void check_no_overlap(std::initializer_list<NamedTensor> outputs,
                      std::initializer_list<NamedTensor> inputs,
                      std::initializer_list<std::pair<const char*, const char*>> in_place = {});

}  // namespace argon
