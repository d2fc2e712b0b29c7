#include "checks.h"

#include "shared/activation.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string_view>

namespace argon {
namespace {

const char* dtype_name(at::ScalarType t) { return c10::toString(t); }

// A size as an error message shows it: its value, also for a symbolic size of a torch.compile
// trace (the traced example's; a message is built only once its check has failed, so the guard
// this records never constrains a graph that is kept). A size with no example value (one that
// depends on data) is shown as its expression.
std::string shown(const c10::SymInt& s) {
  if (const auto v = s.maybe_as_int()) return std::to_string(*v);
  if (s.has_hint()) return std::to_string(s.guard_int(__FILE__, __LINE__));
  return s.toSymNodeImplUnowned()->str();
}

std::string shown(c10::SymIntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + shown(sizes[i]);
  return s + "]";
}

void check_device(const at::Tensor& t, const char* name, const at::Device& dev) {
  TORCH_CHECK_VALUE(t.device() == dev, name, " must be on ", dev, " like the other tensors of the "
                    "call, got ", t.device());
}

void check_dim(const at::Tensor& t, const char* name, int64_t dim, const char* shape) {
  TORCH_CHECK_VALUE(t.dim() == dim, name, " must be ", dim, "-D ", shape, ", got shape ",
                    shown(t.sym_sizes()));
}

void check_float(at::ScalarType dtype, const char* name) {
  TORCH_CHECK_VALUE(is_float_data(dtype), name, " must be float32, float16 or bfloat16, got ",
                    dtype_name(dtype));
}

void check_float(const at::Tensor& t, const char* name) { check_float(t.scalar_type(), name); }

void check_int32(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt, name, " must be int32 (as moe_plan returns it), "
                    "got ", dtype_name(t.scalar_type()));
}

void check_power_of_two(int64_t tile_m) {
  TORCH_CHECK_VALUE(tile_m >= 1 && (tile_m & (tile_m - 1)) == 0,
                    "tile_m must be a power of two, got ", tile_m);
}

// Outputs are written through raw pointers: they must be dense, with the exact shape.
void check_out(const at::Tensor& t, const char* name, c10::SymIntArrayRef shape,
               at::ScalarType dtype, const at::Device& dev) {
  TORCH_CHECK_VALUE(t.sym_sizes() == shape, name, " must have shape ", shown(shape), ", got ",
                    shown(t.sym_sizes()));
  TORCH_CHECK_VALUE(t.scalar_type() == dtype, name, " must be ", dtype_name(dtype), ", got ",
                    dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.is_contiguous(), name,
                    " must be contiguous (pass a fresh torch.empty buffer)");
  check_device(t, name, dev);
}

c10::SymInt sym_min(const c10::SymInt& a, const c10::SymInt& b) { return a.min(b); }
int64_t sym_min(int64_t a, int64_t b) { return std::min(a, b); }

template <typename Int>
PlanDimsOf<Int> plan_dims(Int T, Int K, Int E, Int tile_m) {
  PlanDimsOf<Int> d;
  d.T = T;
  d.K = K;
  d.E = E;
  d.tile_m = tile_m;
  const Int n = T * K;
  const Int bound = n + sym_min(E, n) * (tile_m - 1);
  d.r_max = (bound + tile_m - 1) / tile_m * tile_m;
  d.n_tiles = d.r_max / tile_m;
  return d;
}

SymPlanDims symbolic(const PlanDims& d) {
  SymPlanDims s;
  s.T = d.T;
  s.K = d.K;
  s.E = d.E;
  s.tile_m = d.tile_m;
  s.r_max = d.r_max;
  s.n_tiles = d.n_tiles;
  return s;
}

}  // namespace

bool is_float_data(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// ---- moe_plan -------------------------------------------------------------------------------

SymPlanDims check_plan_args(const at::Tensor& topk_ids, const at::Tensor& topk_weights,
                            int64_t n_expert, int64_t tile_m) {
  check_dim(topk_ids, "topk_ids", 2, "[T, K]");
  TORCH_CHECK_VALUE(topk_ids.scalar_type() == at::kInt || topk_ids.scalar_type() == at::kLong,
                    "topk_ids must be int32 or int64, got ", dtype_name(topk_ids.scalar_type()));
  check_dim(topk_weights, "topk_weights", 2, "[T, K]");
  check_float(topk_weights, "topk_weights");
  TORCH_CHECK_VALUE(topk_weights.sym_sizes() == topk_ids.sym_sizes(), "topk_weights must have the "
                    "shape of topk_ids ", shown(topk_ids.sym_sizes()), ", got ",
                    shown(topk_weights.sym_sizes()));
  check_device(topk_weights, "topk_weights", topk_ids.device());
  TORCH_CHECK_VALUE(n_expert >= 1, "n_expert must be >= 1, got ", n_expert);
  TORCH_CHECK_VALUE(n_expert <= kMaxExperts, "n_expert must be at most ", kMaxExperts,
                    " (the plan keeps int32 counts and offsets per expert), got ", n_expert);
  TORCH_CHECK_VALUE(tile_m >= 1 && tile_m <= 4096 && (tile_m & (tile_m - 1)) == 0,
                    "tile_m must be a power of two in [1, 4096], got ", tile_m);
  const SymPlanDims d = plan_dims<c10::SymInt>(topk_ids.sym_size(0), topk_ids.sym_size(1),
                                               n_expert, tile_m);
  TORCH_CHECK_VALUE(d.r_max <= std::numeric_limits<int32_t>::max(),
                    "moe_plan: T*K plus padding must fit in int32 rows; got T=", shown(d.T),
                    ", K=", shown(d.K), ", tile_m=", tile_m, " (", shown(d.r_max),
                    " rows): split the batch");
  return d;
}

PlanDims check_plan_inputs(const at::Tensor& topk_ids, const at::Tensor& topk_weights,
                           int64_t n_expert, int64_t tile_m) {
  check_plan_args(topk_ids, topk_weights, n_expert, tile_m);
  return plan_dims<int64_t>(topk_ids.size(0), topk_ids.size(1), n_expert, tile_m);
}

void check_plan_outputs(const SymPlanDims& d, const at::Tensor& topk_ids,
                        const at::Tensor& topk_weights, const at::Tensor& counts,
                        const at::Tensor& offsets, const at::Tensor& sorted_token,
                        const at::Tensor& sorted_weight, const at::Tensor& pos,
                        const at::Tensor& tile_expert, const at::Tensor& meta) {
  const auto dev = topk_ids.device();
  check_out(counts, "counts", {d.E}, at::kInt, dev);
  check_out(offsets, "offsets", {d.E + 1}, at::kInt, dev);
  check_out(sorted_token, "sorted_token", {d.r_max}, at::kInt, dev);
  check_out(sorted_weight, "sorted_weight", {d.r_max}, at::kFloat, dev);
  check_out(pos, "pos", {d.T, d.K}, at::kInt, dev);
  check_out(tile_expert, "tile_expert", {d.n_tiles}, at::kInt, dev);
  check_out(meta, "meta", {c10::SymInt(ARGON_META_SIZE)}, at::kInt, dev);
  check_no_overlap({{"counts", &counts}, {"offsets", &offsets}, {"sorted_token", &sorted_token},
                    {"sorted_weight", &sorted_weight}, {"pos", &pos},
                    {"tile_expert", &tile_expert}, {"meta", &meta}},
                   {{"topk_ids", &topk_ids}, {"topk_weights", &topk_weights}});
}

void check_plan_outputs(const PlanDims& d, const at::Tensor& topk_ids,
                        const at::Tensor& topk_weights, const at::Tensor& counts,
                        const at::Tensor& offsets, const at::Tensor& sorted_token,
                        const at::Tensor& sorted_weight, const at::Tensor& pos,
                        const at::Tensor& tile_expert, const at::Tensor& meta) {
  check_plan_outputs(symbolic(d), topk_ids, topk_weights, counts, offsets, sorted_token,
                     sorted_weight, pos, tile_expert, meta);
}

// ---- moe_gather, moe_combine, swiglu ---------------------------------------------------------

SymShape check_gather_inputs(const at::Tensor& x, const at::Tensor& sorted_token) {
  check_dim(x, "x", 2, "[T, H]");
  check_float(x, "x");
  check_dim(sorted_token, "sorted_token", 1, "[R]");
  check_int32(sorted_token, "sorted_token");
  check_device(sorted_token, "sorted_token", x.device());
  return {sorted_token.sym_size(0), x.sym_size(1)};
}

void check_gather(const at::Tensor& x, const at::Tensor& sorted_token, const at::Tensor& out) {
  const SymShape shape = check_gather_inputs(x, sorted_token);
  check_float(out, "out");
  check_out(out, "out", shape, out.scalar_type(), x.device());
  check_no_overlap({{"out", &out}}, {{"x", &x}, {"sorted_token", &sorted_token}});
}

SymShape check_combine_inputs(const at::Tensor& y, const at::Tensor& pos,
                              const at::Tensor& topk_weights,
                              const std::optional<at::Tensor>& shared,
                              const std::optional<at::Tensor>& residual) {
  check_dim(y, "y", 2, "[R, H]");
  check_float(y, "y");
  check_dim(pos, "pos", 2, "[T, K]");
  check_int32(pos, "pos");
  check_device(pos, "pos", y.device());
  check_dim(topk_weights, "topk_weights", 2, "[T, K]");
  check_float(topk_weights, "topk_weights");
  TORCH_CHECK_VALUE(topk_weights.sym_sizes() == pos.sym_sizes(), "topk_weights must have the "
                    "shape of pos ", shown(pos.sym_sizes()), ", got ",
                    shown(topk_weights.sym_sizes()));
  check_device(topk_weights, "topk_weights", y.device());
  SymShape shape{pos.sym_size(0), y.sym_size(1)};
  for (const auto& [opt, name] : {std::pair{&shared, "shared"}, std::pair{&residual, "residual"}}) {
    if (!opt->has_value()) continue;
    const at::Tensor& t = opt->value();
    check_float(t, name);
    TORCH_CHECK_VALUE(t.dim() == 2 && t.sym_sizes() == c10::SymIntArrayRef(shape), name,
                      " must have shape [T, H] = ", shown(shape), ", got ",
                      shown(t.sym_sizes()));
    check_device(t, name, y.device());
  }
  return shape;
}

void check_combine(const at::Tensor& y, const at::Tensor& pos, const at::Tensor& topk_weights,
                   const std::optional<at::Tensor>& shared,
                   const std::optional<at::Tensor>& residual, const at::Tensor& out) {
  const SymShape shape = check_combine_inputs(y, pos, topk_weights, shared, residual);
  check_float(out, "out");
  check_out(out, "out", shape, out.scalar_type(), y.device());
  // out may be the residual itself: each element of residual is read before the same element
  // of out is written.
  check_no_overlap({{"out", &out}},
                   {{"y", &y}, {"pos", &pos}, {"topk_weights", &topk_weights},
                    {"shared", shared ? &*shared : nullptr},
                    {"residual", residual ? &*residual : nullptr}},
                   {{"out", "residual"}});
}

int check_activation(c10::string_view activation) {
  int act = -1;
  std::string names;  // the activations, from the one table of them (shared/activation.h)
#define ARGON_ACTIVATION_CODE(name, code)             \
  if (activation == #name) act = code;                \
  names += std::string(names.empty() ? "" : ", ") + "\"" #name "\"";
  ARGON_ACTIVATIONS(ARGON_ACTIVATION_CODE)
#undef ARGON_ACTIVATION_CODE
  TORCH_CHECK_VALUE(act >= 0, "activation must be one of ", names, ", got \"",
                    std::string(activation), "\"");
  return act;
}

SwigluArgs check_swiglu_inputs(const at::Tensor& gate, const std::optional<at::Tensor>& up,
                               c10::string_view activation) {
  const int act = check_activation(activation);
  check_dim(gate, "gate", 2, up.has_value() ? "[R, I]" : "[R, 2*I] (gate half, then up half)");
  check_float(gate, "gate");
  c10::SymInt inner = gate.sym_size(1);
  if (up.has_value()) {
    TORCH_CHECK_VALUE(up->scalar_type() == gate.scalar_type(), "up must have the dtype of gate (",
                      dtype_name(gate.scalar_type()), "), got ", dtype_name(up->scalar_type()));
    TORCH_CHECK_VALUE(up->sym_sizes() == gate.sym_sizes(), "up must have the shape of gate ",
                      shown(gate.sym_sizes()), ", got ", shown(up->sym_sizes()));
    check_device(*up, "up", gate.device());
  } else {
    TORCH_CHECK_VALUE(inner % 2 == 0, "gate holds gate and up halves, so its last dim must be "
                      "even, got ", shown(inner));
    inner = inner / 2;
  }
  return {act, {gate.sym_size(0), inner}};
}

int check_swiglu(const at::Tensor& gate, const std::optional<at::Tensor>& up,
                 c10::string_view activation, const at::Tensor& out) {
  const SwigluArgs args = check_swiglu_inputs(gate, up, activation);
  check_float(out, "out");
  check_out(out, "out", args.out_shape, out.scalar_type(), gate.device());
  // With gate and up as two tensors, out may be either of them (elementwise, read before write).
  check_no_overlap({{"out", &out}}, {{"gate", &gate}, {"up", up ? &*up : nullptr}},
                   {{"out", "gate"}, {"out", "up"}});
  return args.activation;
}

SwigluArgs check_swiglu_backward_inputs(const at::Tensor& grad_out, const at::Tensor& gate,
                                        const std::optional<at::Tensor>& up,
                                        c10::string_view activation) {
  SwigluArgs args = check_swiglu_inputs(gate, up, activation);
  check_dim(grad_out, "grad_out", 2, "[R, I]");
  check_float(grad_out, "grad_out");
  TORCH_CHECK_VALUE(grad_out.sym_sizes() == c10::SymIntArrayRef(args.out_shape),
                    "grad_out must have swiglu's output shape [R, I] = ", shown(args.out_shape),
                    ", got ", shown(grad_out.sym_sizes()));
  check_device(grad_out, "grad_out", gate.device());
  args.out_shape[1] = args.out_shape[1] * 2;
  return args;
}

int check_swiglu_backward(const at::Tensor& grad_out, const at::Tensor& gate,
                          const std::optional<at::Tensor>& up, c10::string_view activation,
                          const at::Tensor& out) {
  const SwigluArgs args = check_swiglu_backward_inputs(grad_out, gate, up, activation);
  check_out(out, "out", args.out_shape, gate.scalar_type(), gate.device());
  check_no_overlap({{"out", &out}},
                   {{"grad_out", &grad_out}, {"gate", &gate}, {"up", up ? &*up : nullptr}});
  return args.activation;
}

// ---- the grouped GEMMs -----------------------------------------------------------------------

void check_tile_plan(const at::Tensor& rows, const char* rows_name, const at::Tensor& tile_expert,
                     int64_t tile_m) {
  check_dim(tile_expert, "tile_expert", 1, "[R / tile_m]");
  check_int32(tile_expert, "tile_expert");
  check_device(tile_expert, "tile_expert", rows.device());
  check_power_of_two(tile_m);
  const c10::SymInt want = tile_expert.sym_size(0) * tile_m;
  TORCH_CHECK_VALUE(rows.sym_size(0) == want, rows_name, " must have tile_expert.size(0) * tile_m = ",
                    shown(want), " rows (the plan's R_max), got ", shown(rows.sym_size(0)));
}

SymShape check_moe_mm_inputs(const at::Tensor& xs, const at::Tensor& w,
                             const at::Tensor& tile_expert, int64_t tile_m) {
  check_dim(xs, "xs", 2, "[R, Kd]");
  check_float(xs, "xs");
  check_dim(w, "w", 3, "[E, N, Kd]");
  TORCH_CHECK_VALUE(w.scalar_type() == xs.scalar_type(), "w must have the dtype of xs (",
                    dtype_name(xs.scalar_type()), "), got ", dtype_name(w.scalar_type()));
  TORCH_CHECK_VALUE(w.sym_size(2) == xs.sym_size(1), "w must be [E, N, Kd] with Kd = xs.size(1) = ",
                    shown(xs.sym_size(1)), ", got ", shown(w.sym_sizes()),
                    " (for a [E, Kd, N] stack pass w.transpose(1, 2))");
  check_device(w, "w", xs.device());
  check_tile_plan(xs, "xs", tile_expert, tile_m);
  return {xs.sym_size(0), w.sym_size(1)};
}

void check_moe_mm(const at::Tensor& xs, const at::Tensor& w, const at::Tensor& tile_expert,
                  int64_t tile_m, const at::Tensor& out) {
  const SymShape shape = check_moe_mm_inputs(xs, w, tile_expert, tile_m);
  check_out(out, "out", shape, xs.scalar_type(), xs.device());
  check_no_overlap({{"out", &out}}, {{"xs", &xs}, {"w", &w}, {"tile_expert", &tile_expert}});
}

SymShape check_moe_mm_weight_grad_inputs(const at::Tensor& xs, const at::Tensor& grad_out,
                                         const at::Tensor& tile_expert, int64_t tile_m,
                                         int64_t n_expert) {
  check_dim(xs, "xs", 2, "[R, Kd]");
  check_float(xs, "xs");
  check_dim(grad_out, "grad_out", 2, "[R, N]");
  TORCH_CHECK_VALUE(grad_out.scalar_type() == xs.scalar_type(), "grad_out must have the dtype of "
                    "xs (", dtype_name(xs.scalar_type()), "), got ",
                    dtype_name(grad_out.scalar_type()));
  TORCH_CHECK_VALUE(grad_out.sym_size(0) == xs.sym_size(0), "grad_out must have the rows of xs (",
                    shown(xs.sym_size(0)), "), got ", shown(grad_out.sym_sizes()));
  check_device(grad_out, "grad_out", xs.device());
  check_tile_plan(xs, "xs", tile_expert, tile_m);
  TORCH_CHECK_VALUE(n_expert >= 1, "n_expert must be >= 1, got ", n_expert);
  TORCH_CHECK_VALUE(n_expert <= kMaxExperts, "n_expert must be at most ", kMaxExperts, ", got ",
                    n_expert);
  return {c10::SymInt(n_expert), grad_out.sym_size(1), xs.sym_size(1)};
}

void check_moe_mm_weight_grad(const at::Tensor& xs, const at::Tensor& grad_out,
                              const at::Tensor& tile_expert, int64_t tile_m, int64_t n_expert,
                              const at::Tensor& out) {
  const SymShape shape = check_moe_mm_weight_grad_inputs(xs, grad_out, tile_expert, tile_m,
                                                         n_expert);
  check_out(out, "out", shape, xs.scalar_type(), xs.device());
  check_no_overlap({{"out", &out}},
                   {{"xs", &xs}, {"grad_out", &grad_out}, {"tile_expert", &tile_expert}});
}

// ---- the quantized op family -----------------------------------------------------------------

namespace {

std::string quant_kernel_formats() {
  std::ostringstream names;
  const char* sep = "";
  for (const QuantFormat& f : kQuantFormats) {
    if (!f.has_kernels) continue;
    names << sep << f.name << " (" << f.type_id << ")";
    sep = ", ";
  }
  return names.str();
}

}  // namespace

const QuantFormat& check_qtype(int64_t qtype) {
  const QuantFormat* fmt = find_quant_format(qtype);
  TORCH_CHECK_VALUE(fmt != nullptr, "qtype ", qtype, " is not a GGML type the quantized ops "
                    "read; supported: ", quant_kernel_formats());
  TORCH_CHECK_VALUE(fmt->has_kernels, "qtype ", qtype, " is ", fmt->name, ", a plain float type: "
                    "the quantized ops take blocks of ", quant_kernel_formats(),
                    " (use F32 / F16 / BF16 weights as a float tensor, with moe_mm)");
  return *fmt;
}

void check_quantized_weight(const at::Tensor& w_q, const QuantFormat& fmt, int64_t n_in,
                            int64_t dims, const char* shape) {
  TORCH_CHECK_VALUE(n_in >= 0 && n_in % fmt.block_elems == 0, "w_q: ", fmt.name,
                    " needs the input dim to be a multiple of ", fmt.block_elems, ", got n_in=",
                    n_in);
  TORCH_CHECK_VALUE(n_in <= std::numeric_limits<int32_t>::max(), "w_q: n_in=", n_in,
                    " does not fit in int32");
  TORCH_CHECK_VALUE(w_q.scalar_type() == at::kByte, "w_q must be uint8 (raw ", fmt.name,
                    " blocks), got ", dtype_name(w_q.scalar_type()));
  if (dims > 0) {
    check_dim(w_q, "w_q", dims, shape);
  } else {
    TORCH_CHECK_VALUE(w_q.dim() >= 2, "w_q must have at least 2 dims ", shape, ", got shape ",
                      shown(w_q.sym_sizes()));
  }
  const int64_t expected = n_in / fmt.block_elems * fmt.block_bytes;
  TORCH_CHECK_VALUE(w_q.sym_size(-1) == expected, "w_q has ", shown(w_q.sym_size(-1)),
                    " bytes per row, but ", fmt.name, " rows of n_in=", n_in, " take ", expected,
                    " (", n_in / fmt.block_elems, " blocks of ", fmt.block_bytes,
                    " bytes); shape ", shown(w_q.sym_sizes()));
}

SymShape check_dequantize_inputs(const at::Tensor& w_q, int64_t qtype, int64_t n_in) {
  check_quantized_weight(w_q, check_qtype(qtype), n_in, 0, "[..., N, row_bytes]");
  SymShape shape(w_q.sym_sizes().begin(), w_q.sym_sizes().end());
  shape.back() = n_in;
  return shape;
}

void check_dequantize_buffer(const at::Tensor& w_q, int64_t n_in, const at::Tensor& out) {
  TORCH_CHECK_VALUE(w_q.dim() >= 1, "w_q must have at least 1 dim [..., row_bytes], got a scalar");
  SymShape shape(w_q.sym_sizes().begin(), w_q.sym_sizes().end());
  shape.back() = n_in;
  check_out(out, "out", shape, at::kFloat, w_q.device());
  check_no_overlap({{"out", &out}}, {{"w_q", &w_q}});
}

const QuantFormat& check_dequantize(const at::Tensor& w_q, int64_t qtype, int64_t n_in,
                                    const at::Tensor& out) {
  check_dequantize_inputs(w_q, qtype, n_in);
  check_dequantize_buffer(w_q, n_in, out);
  return check_qtype(qtype);
}

ActivationQuant check_activation_quant(c10::string_view activation_quant) {
  if (activation_quant == "none") return ActivationQuant::kNone;
  TORCH_CHECK_VALUE(activation_quant == "q8", "activation_quant must be one of \"none\", "
                    "\"q8\", got \"", std::string(activation_quant), "\"");
  return ActivationQuant::kQ8;
}

void check_exact_activations_only(ActivationQuant activation_quant, const char* backend) {
  TORCH_CHECK_VALUE(activation_quant == ActivationQuant::kNone, "activation_quant=\"q8\" has "
                    "no kernels on ", backend, " (its integer kernels run on the CPU and on CUDA "
                    "sm_80+); pass activation_quant=\"none\" there, the exact-dequant product");
}

SymShape check_moe_qmm_inputs(const at::Tensor& xs, const at::Tensor& w_q, int64_t qtype,
                              int64_t n_in, const at::Tensor& tile_expert, int64_t tile_m,
                              c10::string_view activation_quant) {
  check_activation_quant(activation_quant);
  check_quantized_weight(w_q, check_qtype(qtype), n_in, 3, "[E, N, row_bytes]");
  check_dim(xs, "xs", 2, "[R, n_in]");
  check_float(xs, "xs");
  TORCH_CHECK_VALUE(xs.sym_size(1) == n_in, "xs must be [R, n_in] with n_in = ", n_in, " (the "
                    "weights' input dim), got shape ", shown(xs.sym_sizes()));
  check_device(w_q, "w_q", xs.device());
  check_tile_plan(xs, "xs", tile_expert, tile_m);
  return {xs.sym_size(0), w_q.sym_size(1)};
}

const QuantFormat& check_moe_qmm(const at::Tensor& xs, const at::Tensor& w_q, int64_t qtype,
                                 int64_t n_in, const at::Tensor& tile_expert, int64_t tile_m,
                                 c10::string_view activation_quant, const at::Tensor& out) {
  const SymShape shape =
      check_moe_qmm_inputs(xs, w_q, qtype, n_in, tile_expert, tile_m, activation_quant);
  check_out(out, "out", shape, xs.scalar_type(), xs.device());
  check_no_overlap({{"out", &out}}, {{"xs", &xs}, {"w_q", &w_q}, {"tile_expert", &tile_expert}});
  return check_qtype(qtype);
}

// ---- overlap -------------------------------------------------------------------------------

namespace {

// The elements [begin, end) of its storage a tensor's elements can touch, counted in its own
// elements from the storage's start (conservative for strided tensors: the hull from the lowest
// to the highest element). No data pointer is read: the two tensors compared share a storage,
// so offsets within it are enough, and meta and fake tensors (no data) answer the same. `Int` is
// int64_t for plain tensors and c10::SymInt for symbolic ones, whose arithmetic is out of line:
// eager calls, which check many aliasing pairs (a fresh plan's seven views of one buffer), keep
// to plain integers.
template <typename Int, typename Dims>
std::pair<Int, Int> element_hull(Dims sizes, Dims strides, const Int& offset) {
  Int lo = 0, hi = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const Int reach = (sizes[d] - 1) * strides[d];
    if (reach < 0) {
      lo = lo + reach;
    } else {
      hi = hi + reach;
    }
  }
  return {offset + lo, offset + hi + 1};
}

// Whether two element hulls overlap in bytes (the tensors may view the storage with different
// element types).
template <typename Int>
bool hulls_overlap(const std::pair<Int, Int>& a, int64_t a_item, const std::pair<Int, Int>& b,
                   int64_t b_item) {
  return a.first * a_item < b.second * b_item && b.first * b_item < a.second * a_item;
}

bool has_symbolic_sizes(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.storage().is_alias_of(b.storage()) &&
         a.sym_storage_offset() == b.sym_storage_offset() && a.sym_sizes() == b.sym_sizes() &&
         a.sym_strides() == b.sym_strides() && a.dtype() == b.dtype();
}

}  // namespace

bool may_overlap(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || !a.has_storage() || !b.has_storage()) return false;
  if (a.device() != b.device() || !a.storage().is_alias_of(b.storage())) return false;
  const int64_t ia = a.element_size(), ib = b.element_size();
  if (!has_symbolic_sizes(a) && !has_symbolic_sizes(b)) {
    if (a.numel() == 0 || b.numel() == 0) return false;
    return hulls_overlap(element_hull<int64_t>(a.sizes(), a.strides(), a.storage_offset()), ia,
                         element_hull<int64_t>(b.sizes(), b.strides(), b.storage_offset()), ib);
  }
  if (a.sym_numel() == 0 || b.sym_numel() == 0) return false;
  return hulls_overlap(
      element_hull<c10::SymInt>(a.sym_sizes(), a.sym_strides(), a.sym_storage_offset()), ia,
      element_hull<c10::SymInt>(b.sym_sizes(), b.sym_strides(), b.sym_storage_offset()), ib);
}

void check_no_overlap(std::initializer_list<NamedTensor> outputs,
                      std::initializer_list<NamedTensor> inputs,
                      std::initializer_list<std::pair<const char*, const char*>> in_place) {
  const auto allowed = [&](const NamedTensor& out, const NamedTensor& in) {
    return std::any_of(in_place.begin(), in_place.end(), [&](const auto& pair) {
      return std::string_view(pair.first) == out.name &&
             std::string_view(pair.second) == in.name && same_view(*out.tensor, *in.tensor);
    });
  };
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (auto p = std::next(o); p != outputs.end(); ++p) {
      TORCH_CHECK_VALUE(!may_overlap(*o->tensor, *p->tensor), "the output buffers ", o->name,
                        " and ", p->name, " overlap in memory; pass separate buffers");
    }
    for (const NamedTensor& in : inputs) {
      if (in.tensor == nullptr || !in.tensor->defined() || allowed(*o, in)) continue;
      TORCH_CHECK_VALUE(!may_overlap(*o->tensor, *in.tensor), "the output ", o->name,
                        " overlaps the input ", in.name, " in memory; pass a separate buffer");
    }
  }
}

}  // namespace argon
