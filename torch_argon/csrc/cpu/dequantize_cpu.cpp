// dequantize on the CPU: out[r] = the float32 values of row r of w_q's blocks, bit for bit as the
// reference (torch_argon/quant/reference.py), through the chunk dequants of quant_blocks.h.
// Parallel over rows; each row's chunks are written straight into out. The row loop
// (dequantize_rows) is compiled for the baseline ISA and for AVX2: the same bits either way (no
// contraction, every operation IEEE-rounded).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "quant_blocks_cpu.h"

namespace argon {
namespace {

constexpr int64_t kGrainValues = 1 << 15;  // values per parallel task: amortises the fork

void dequantize_out_cpu(const Tensor& w_q, int64_t qtype, int64_t n_in, const Tensor& out) {
  check_dequantize(w_q, qtype, n_in, out);
  if (out.numel() == 0) return;
  Tensor w = w_q.reshape({-1, w_q.size(-1)});  // a view where the leading dims allow one
  if (w.stride(1) != 1) w = w.contiguous();
  const uint8_t* w_data = w.const_data_ptr<uint8_t>();
  const int64_t rows = w.size(0), row_stride = w.stride(0);
  float* out_data = out.data_ptr<float>();
  dispatch_quant_format(qtype, [&]<typename Block, int ELEMS, int BYTES, ChunkDequant<Block> DQ>() {
    at::parallel_for(0, rows, std::max<int64_t>(1, kGrainValues / n_in), [&](int64_t r0, int64_t r1) {
      dequantize_rows<Block, ELEMS, DQ>(w_data + r0 * row_stride, row_stride, r1 - r0, n_in,
                                        out_data + r0 * n_in);
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("dequantize_out", TORCH_FN(dequantize_out_cpu)); }

}  // namespace argon
