#include "metal/out_ops.h"

#include <stdexcept>

#include "checks.h"

namespace argon::metal {
namespace {

uint32_t u32(int64_t v, const char* what) {
  TORCH_CHECK_VALUE(v >= 0 && v <= int64_t(UINT32_MAX), what, " = ", v, " does not fit the Metal "
              "kernels' 32-bit sizes");
  return static_cast<uint32_t>(v);
}

}  // namespace

ArgonDtype argon_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ARGON_F32;
    case at::kHalf: return ARGON_F16;
    case at::kBFloat16: return ARGON_BF16;
    default: TORCH_CHECK_VALUE(false, "unsupported dtype ", t);
  }
}

void moe_plan_out(Target& target, const Tensor& topk_ids, const Tensor& topk_weights,
              int64_t n_expert, int64_t tile_m, const Tensor& counts, const Tensor& offsets,
              const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
              const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, topk_weights, counts, offsets, sorted_token, sorted_weight, pos,
                     tile_expert, meta);
  PlanLaunch launch;
  try {
    launch = plan_launch(d.T, d.K, d.E, d.tile_m, d.r_max, topk_ids.scalar_type() == at::kLong,
                         argon_dtype(topk_weights.scalar_type()));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  const Tensor ids = topk_ids.contiguous(), w = topk_weights.contiguous();
  const Tensor scratch =
      at::empty({static_cast<int64_t>(launch.scratch_ints)}, ids.options().dtype(at::kInt));
  const PlanBuffers b{target.bind(ids), target.bind(w), target.bind(counts),
                      target.bind(offsets), target.bind(sorted_token), target.bind(sorted_weight),
                      target.bind(pos), target.bind(tile_expert), target.bind(meta),
                      target.bind(scratch)};
  target.encode([&](Encoder& enc) { encode_plan(enc, launch, b); });
}

void moe_gather_out(Target& target, const Tensor& x_in, const Tensor& sorted_token_in,
                const Tensor& out) {
  check_gather(x_in, sorted_token_in, out);
  const Tensor x = x_in.contiguous(), sorted_token = sorted_token_in.contiguous();
  ArgonGatherParams p{};
  p.rows = u32(out.size(0), "rows");
  p.cols = u32(x.size(1), "H");
  p.n_tokens = u32(x.size(0), "T");
  p.src_dtype = argon_dtype(x.scalar_type());
  p.dst_dtype = argon_dtype(out.scalar_type());
  const GatherBuffers b{target.bind(x), target.bind(sorted_token), target.bind(out)};
  target.encode([&](Encoder& enc) { encode_gather(enc, p, b); });
}

void moe_combine_out(Target& target, const Tensor& y_in, const Tensor& pos_in,
                 const Tensor& w_in, const OptTensor& shared_in, const OptTensor& residual_in,
                 const Tensor& out) {
  check_combine(y_in, pos_in, w_in, shared_in, residual_in, out);
  const Tensor y = y_in.contiguous(), pos = pos_in.contiguous(), w = w_in.contiguous();
  const Tensor shared = shared_in ? shared_in->contiguous() : y;
  const Tensor residual = residual_in ? residual_in->contiguous() : y;
  ArgonCombineParams p{};
  p.n_tokens = u32(pos.size(0), "T");
  p.top_k = u32(pos.size(1), "K");
  p.cols = u32(y.size(1), "H");
  p.y_rows = u32(y.size(0), "R");
  p.y_dtype = argon_dtype(y.scalar_type());
  p.w_dtype = argon_dtype(w.scalar_type());
  p.shared_dtype = argon_dtype(shared.scalar_type());
  p.residual_dtype = argon_dtype(residual.scalar_type());
  p.out_dtype = argon_dtype(out.scalar_type());
  p.has_shared = shared_in.has_value();
  p.has_residual = residual_in.has_value();
  const CombineBuffers b{target.bind(y), target.bind(pos), target.bind(w), target.bind(shared),
                         target.bind(residual), target.bind(out)};
  target.encode([&](Encoder& enc) { encode_combine(enc, p, b); });
}

void swiglu_out(Target& target, const Tensor& gate_in, const OptTensor& up_in,
                c10::string_view activation, const Tensor& out) {
  const int act = check_swiglu(gate_in, up_in, activation, out);
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in ? up_in->contiguous() : gate;
  ArgonSwigluParams p{};
  p.rows = u32(out.size(0), "R");
  p.cols = u32(out.size(1), "I");
  p.in_stride = static_cast<uint64_t>(gate.size(1));
  p.up_offset = up_in ? 0 : p.cols;
  p.in_dtype = argon_dtype(gate.scalar_type());
  p.out_dtype = argon_dtype(out.scalar_type());
  p.activation = static_cast<uint32_t>(act);
  const SwigluBuffers b{target.bind(gate), target.bind(up), target.bind(out)};
  target.encode([&](Encoder& enc) { encode_swiglu(enc, p, b); });
}

void swiglu_backward_out(Target& target, const Tensor& grad_out_in, const Tensor& gate_in,
                         const OptTensor& up_in, c10::string_view activation, const Tensor& out) {
  const int act = check_swiglu_backward(grad_out_in, gate_in, up_in, activation, out);
  const Tensor grad_out = grad_out_in.contiguous();
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in ? up_in->contiguous() : gate;
  ArgonSwigluBackwardParams p{};
  p.rows = u32(grad_out.size(0), "R");
  p.cols = u32(grad_out.size(1), "I");
  p.in_stride = static_cast<uint64_t>(gate.size(1));
  p.up_offset = up_in ? 0 : p.cols;
  p.grad_dtype = argon_dtype(grad_out.scalar_type());
  p.value_dtype = argon_dtype(gate.scalar_type());
  p.activation = static_cast<uint32_t>(act);
  const SwigluBackwardBuffers b{target.bind(grad_out), target.bind(gate), target.bind(up),
                                target.bind(out)};
  target.encode([&](Encoder& enc) { encode_swiglu_backward(enc, p, b); });
}

void moe_mm_weight_grad_out(Target& target, const Tensor& xs_in, const Tensor& grad_out_in,
                            const Tensor& tile_expert_in, int64_t tile_m, int64_t n_expert,
                            const Tensor& out) {
  check_moe_mm_weight_grad(xs_in, grad_out_in, tile_expert_in, tile_m, n_expert, out);
  const Tensor xs = xs_in.contiguous();
  const Tensor grad_out = grad_out_in.contiguous();
  const Tensor tile_expert = tile_expert_in.contiguous();
  ArgonMoeMmWeightGradParams p{};
  p.rows = u32(xs.size(0), "R");
  p.n = u32(grad_out.size(1), "N");
  p.kd = u32(xs.size(1), "Kd");
  p.tile_m = u32(tile_m, "tile_m");
  p.n_expert = u32(n_expert, "n_expert");
  p.dtype = argon_dtype(xs.scalar_type());
  const MoeMmWeightGradBuffers b{target.bind(xs), target.bind(grad_out), target.bind(tile_expert),
                                 target.bind(out)};
  target.encode([&](Encoder& enc) { encode_moe_mm_weight_grad(enc, p, b); });
}

void moe_mm_out(Target& target, const Tensor& xs, const Tensor& w, const Tensor& tile_expert_in,
                int64_t tile_m, const Tensor& out) {
  check_moe_mm(xs, w, tile_expert_in, tile_m, out);
  const Tensor tile_expert = tile_expert_in.contiguous();
  ArgonMoeMmParams p{};
  p.rows = u32(xs.size(0), "R");
  p.n = u32(w.size(1), "N");
  p.kd = u32(w.size(2), "Kd");
  p.tile_m = u32(tile_m, "tile_m");
  p.n_expert = u32(w.size(0), "E");
  p.dtype = argon_dtype(xs.scalar_type());
  // Strides are 64-bit in the params (and never negative in torch).
  p.xs_row_stride = static_cast<uint64_t>(xs.stride(0));
  p.xs_col_stride = static_cast<uint64_t>(xs.stride(1));
  p.w_expert_stride = static_cast<uint64_t>(w.stride(0));
  p.w_row_stride = static_cast<uint64_t>(w.stride(1));
  p.w_col_stride = static_cast<uint64_t>(w.stride(2));
  const MoeMmBuffers b{target.bind(xs), target.bind(w), target.bind(tile_expert), target.bind(out)};
  target.encode([&](Encoder& enc) { encode_moe_mm(enc, p, b); });
}

void dequantize_out(Target& target, const Tensor& w_q, int64_t qtype, int64_t n_in,
                    const Tensor& out) {
  check_dequantize(w_q, qtype, n_in, out);
  if (out.numel() == 0) return;
  const Tensor w = w_q.contiguous();
  ArgonDequantParams p{};
  p.rows = u32(w.numel() / w.size(-1), "rows of w_q");
  p.n_in = u32(n_in, "n_in");
  p.row_bytes = u32(w.size(-1), "row_bytes");
  p.chunks_per_row = p.n_in / ARGON_QUANT_CHUNK;
  TORCH_CHECK_VALUE(uint64_t(p.rows) * p.chunks_per_row / ARGON_DQ_THREADS < UINT32_MAX,
                    "dequantize on Metal: ", p.rows, " rows of ", n_in, " values is more than "
                    "one launch covers; dequantize a slice at a time");
  const DequantizeBuffers b{target.bind(w), target.bind(out)};
  target.encode([&](Encoder& enc) { encode_dequantize(enc, static_cast<uint32_t>(qtype), p, b); });
}

void moe_qmm_out(Target& target, const Tensor& xs, const Tensor& w_q_in, int64_t qtype,
                 int64_t n_in, const Tensor& tile_expert_in, int64_t tile_m,
                 c10::string_view activation_quant, const Tensor& out) {
  check_moe_qmm(xs, w_q_in, qtype, n_in, tile_expert_in, tile_m, activation_quant, out);
  check_exact_activations_only(check_activation_quant(activation_quant), "Metal");
  const Tensor tile_expert = tile_expert_in.contiguous();
  const Tensor w_q = w_q_in.stride(2) == 1 ? w_q_in : w_q_in.contiguous();
  ArgonMoeQmmParams p{};
  p.rows = u32(xs.size(0), "R");
  p.n = u32(w_q.size(1), "N");
  p.n_in = u32(n_in, "n_in");
  p.tile_m = u32(tile_m, "tile_m");
  p.n_expert = u32(w_q.size(0), "E");
  p.dtype = argon_dtype(xs.scalar_type());
  TORCH_CHECK_VALUE(xs.stride(0) >= 0 && xs.stride(1) >= 0 && w_q.stride(0) >= 0 &&
                        w_q.stride(1) >= 0,
                    "moe_qmm on Metal: xs and w_q need non-negative strides");
  p.xs_row_stride = static_cast<uint64_t>(xs.stride(0));
  p.xs_col_stride = static_cast<uint64_t>(xs.stride(1));
  p.w_expert_stride = static_cast<uint64_t>(w_q.stride(0));
  p.w_row_stride = static_cast<uint64_t>(w_q.stride(1));
  const MoeQmmBuffers b{target.bind(xs), target.bind(w_q), target.bind(tile_expert),
                        target.bind(out)};
  target.encode([&](Encoder& enc) { encode_moe_qmm(enc, static_cast<uint32_t>(qtype), p, b); });
}

}  // namespace argon::metal
