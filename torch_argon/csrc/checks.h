// Argument checks, one per op, shared by every backend's _out kernel, the functional forms and the
// fakes (meta tensors, torch.compile's FakeTensors: python_meta.cpp). Each failure is a
// ValueError that names the argument and what was expected, raised before any output is touched,
// so bad input never writes out of bounds. Value checks (ids in range) are the backends' own: the
// CPU raises, GPUs count.
//
// Sizes are read as c10::SymInt, so the same checks run on the symbolic sizes of a torch.compile
// trace (a comparison there records a guard, as a Python fake's would) and on plain tensors
// (where a SymInt is an int64).
#pragma once
#include <ATen/ATen.h>

#include <initializer_list>
#include <tuple>

#include "op_signatures.h"
#include "shared/plan_params.h"
#include "quant_formats.h"

namespace argon {

// The most experts a plan takes: it keeps int32 counts and offsets per expert (128 MiB at this
// bound), and the CPU backend a scratch row per expert; beyond, one call could ask for tens of
// gigabytes. docs/contract.md states it.
inline constexpr int64_t kMaxExperts = int64_t{1} << 24;

// Shapes of one plan; every size depends only on (T, K, E, tile_m). `Int` is int64_t for the
// kernels and c10::SymInt for the functional forms and the fakes.
template <typename Int>
struct PlanDimsOf {
  Int T = 0, K = 0, E = 0, tile_m = 0;
  Int r_max = 0;    // upper bound on padded rows: round_up(T*K + min(E, T*K)*(tm-1), tm)
  Int n_tiles = 0;  // r_max / tile_m
  Int entries() const { return T * K; }
};
using PlanDims = PlanDimsOf<int64_t>;
using SymPlanDims = PlanDimsOf<c10::SymInt>;

// Allocates them, sized from d alone: `make(sizes, dtype)` makes one tensor (at::empty with the
// ids' options, or a backend's own allocator where the dispatcher round trip costs too much).
template <typename Int, typename Make>
PlanOutputs make_plan_outputs(const PlanDimsOf<Int>& d, Make&& make) {
  return {make({d.E}, at::kInt),     make({d.E + 1}, at::kInt),       make({d.r_max}, at::kInt),
          make({d.r_max}, at::kFloat), make({d.T, d.K}, at::kInt), make({d.n_tiles}, at::kInt),
          make({Int(ARGON_META_SIZE)}, at::kInt)};
}

// moe_plan: ids [T,K] int32/int64, weights [T,K] float, 1 <= E <= kMaxExperts, tile_m a power of
// two. check_plan_args gives the (possibly symbolic) dims; check_plan_inputs the kernels' ints.
SymPlanDims check_plan_args(const at::Tensor& topk_ids, const at::Tensor& topk_weights,
                            int64_t n_expert, int64_t tile_m);
PlanDims check_plan_inputs(const at::Tensor& topk_ids, const at::Tensor& topk_weights,
                           int64_t n_expert, int64_t tile_m);
void check_plan_outputs(const SymPlanDims& d, const at::Tensor& topk_ids,
                        const at::Tensor& topk_weights, const at::Tensor& counts,
                        const at::Tensor& offsets, const at::Tensor& sorted_token,
                        const at::Tensor& sorted_weight, const at::Tensor& pos,
                        const at::Tensor& tile_expert, const at::Tensor& meta);
void check_plan_outputs(const PlanDims& d, const at::Tensor& topk_ids,
                        const at::Tensor& topk_weights, const at::Tensor& counts,
                        const at::Tensor& offsets, const at::Tensor& sorted_token,
                        const at::Tensor& sorted_weight, const at::Tensor& pos,
                        const at::Tensor& tile_expert, const at::Tensor& meta);

// Each op below has check_<op>_inputs, which checks every argument but `out` and gives the shape
// `out` must have (the functional forms allocate it), and check_<op>, which checks `out` too
// (dtype, exact shape, contiguity, device, no overlap with an input): what every _out kernel runs.
using SymShape = c10::SymDimVector;

// moe_gather: x [T,H] float, sorted_token [R] int32, out [R,H] float.
SymShape check_gather_inputs(const at::Tensor& x, const at::Tensor& sorted_token);
void check_gather(const at::Tensor& x, const at::Tensor& sorted_token, const at::Tensor& out);

// moe_combine: y [R,H], pos [T,K] int32, weights [T,K], shared/residual [T,H], out [T,H].
SymShape check_combine_inputs(const at::Tensor& y, const at::Tensor& pos,
                              const at::Tensor& topk_weights,
                              const std::optional<at::Tensor>& shared,
                              const std::optional<at::Tensor>& residual);
void check_combine(const at::Tensor& y, const at::Tensor& pos, const at::Tensor& topk_weights,
                   const std::optional<at::Tensor>& shared,
                   const std::optional<at::Tensor>& residual, const at::Tensor& out);

// activation: one of "silu", "gelu", "gelu_tanh" (a ValueError naming the argument otherwise);
// its code (ARGON_ACT_* of shared/swiglu_params.h).
int check_activation(c10::string_view activation);

// swiglu: gate and up [R,I] (or gate [R,2I] with no up), out [R,I], activation one of "silu",
// "gelu", "gelu_tanh", whose code (ARGON_ACT_* of metal/swiglu_params.h) check_swiglu returns.
struct SwigluArgs {
  int activation;
  SymShape out_shape;
};
SwigluArgs check_swiglu_inputs(const at::Tensor& gate, const std::optional<at::Tensor>& up,
                               c10::string_view activation);
int check_swiglu(const at::Tensor& gate, const std::optional<at::Tensor>& up,
                 c10::string_view activation, const at::Tensor& out);

// swiglu_backward: grad_out [R, I] (any float dtype: the forward's output dtype), gate and up as
// swiglu takes them, out [R, 2I] of gate's dtype (d gate | d up); the activation's code.
SwigluArgs check_swiglu_backward_inputs(const at::Tensor& grad_out, const at::Tensor& gate,
                                        const std::optional<at::Tensor>& up,
                                        c10::string_view activation);
int check_swiglu_backward(const at::Tensor& grad_out, const at::Tensor& gate,
                          const std::optional<at::Tensor>& up, c10::string_view activation,
                          const at::Tensor& out);

// A grouped GEMM's rows and tiles: tile_expert [R / tile_m] int32 on rows' device, tile_m a
// power of two, and `rows` (named rows_name in errors) with tile_expert.size(0) * tile_m rows.
// moe_mm and moe_qmm check xs with it; the Triton GEMMs their gathered or row-ordered input.
void check_tile_plan(const at::Tensor& rows, const char* rows_name, const at::Tensor& tile_expert,
                     int64_t tile_m);

// moe_mm: xs [R,Kd], w [E,N,Kd] (any strides), tile_expert [R/tile_m] int32, out [R,N].
SymShape check_moe_mm_inputs(const at::Tensor& xs, const at::Tensor& w,
                             const at::Tensor& tile_expert, int64_t tile_m);
void check_moe_mm(const at::Tensor& xs, const at::Tensor& w, const at::Tensor& tile_expert,
                  int64_t tile_m, const at::Tensor& out);

// moe_mm_weight_grad: xs [R,Kd], grad_out [R,N] of xs's dtype, tile_expert [R/tile_m] int32,
// 1 <= n_expert <= kMaxExperts, out [E,N,Kd] of xs's dtype, contiguous.
SymShape check_moe_mm_weight_grad_inputs(const at::Tensor& xs, const at::Tensor& grad_out,
                                         const at::Tensor& tile_expert, int64_t tile_m,
                                         int64_t n_expert);
void check_moe_mm_weight_grad(const at::Tensor& xs, const at::Tensor& grad_out,
                              const at::Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                              const at::Tensor& out);

// The quantized op family. qtype: a ggml type id with kernels (quant_formats.h); w_q: uint8
// blocks [..., N, row_bytes] for rows of n_in values (n_in a multiple of the format's block).
const QuantFormat& check_qtype(int64_t qtype);
void check_quantized_weight(const at::Tensor& w_q, const QuantFormat& fmt, int64_t n_in,
                            int64_t dims, const char* shape);
// dequantize: w_q [..., N, row_bytes] (>= 2 dims), out float32 [..., N, n_in].
SymShape check_dequantize_inputs(const at::Tensor& w_q, int64_t qtype, int64_t n_in);
const QuantFormat& check_dequantize(const at::Tensor& w_q, int64_t qtype, int64_t n_in,
                                    const at::Tensor& out);
// The `out` of a dequantize of w_q's rows to n_in values, for any format, the plain float ones
// included (the Python API reinterprets those without a kernel and checks their out with this).
void check_dequantize_buffer(const at::Tensor& w_q, int64_t n_in, const at::Tensor& out);
// moe_qmm's activation_quant: "none" (exact-dequant product) or "q8" (activations rounded to
// 8-bit blocks first: torch_argon/quant/activation_q8.py).
enum class ActivationQuant { kNone, kQ8 };
ActivationQuant check_activation_quant(c10::string_view activation_quant);
// The ValueError of a backend without q8 kernels (the same words as the Python backends').
void check_exact_activations_only(ActivationQuant activation_quant, const char* backend);
// moe_qmm: xs [R, n_in] float, w_q [E, N, row_bytes], tile_expert [R/tile_m] int32, out [R, N]
// of xs's dtype, activation_quant as above.
SymShape check_moe_qmm_inputs(const at::Tensor& xs, const at::Tensor& w_q, int64_t qtype,
                              int64_t n_in, const at::Tensor& tile_expert, int64_t tile_m,
                              c10::string_view activation_quant);
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
// strided tensors). Meta and fake tensors answer as their real counterparts would: views of one
// storage overlap by the same offsets.
bool may_overlap(const at::Tensor& a, const at::Tensor& b);
// Raises a ValueError naming the pair if two outputs overlap, or an output overlaps an input,
// except the (output, input) pairs in `in_place` when the two are the same view (the in-place
// uses docs/contract.md allows).
void check_no_overlap(std::initializer_list<NamedTensor> outputs,
                      std::initializer_list<NamedTensor> inputs,
                      std::initializer_list<std::pair<const char*, const char*>> in_place = {});

}  // namespace argon
