// moe_qmm with activation_quant="q8" on the CPU: integer dot products of 8-bit activations with
// the weights' integer codes, through the kernels of the CPU's ISA variant (cpu_isa.h,
// q8_kernels.h).
//
// - Activations: every row of xs that a tile of an expert owns is quantized once per call
//   (activation_q8.py's definition, bit for bit), in parallel over row chunks, into buffers of
//   the calling thread that are kept across calls.
// - Work: the tasks of qmm_tasks.h, weight blocks a multiple of the panels' 16 columns. A task
//   decodes its block of weight rows into a panel (per-thread buffer, about kPanelValues codes:
//   it stays in L2 while the chunk's rows stream through it), runs the GEMM into a per-thread
//   fp32 tile and rounds that once into out.
// - Parallelism and determinism: tasks from an atomic counter over at::get_num_threads() workers,
//   each output computed by one task in a fixed order, so the result does not depend on the
//   thread count. No allocation per call once the buffers have grown.
#include "moe_qmm_q8_cpu.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <vector>

#include "../float_dispatch.h"
#include "cpu_isa.h"
#include "q8_decode.h"
#include "qmm_tasks.h"

namespace argon {
namespace {

constexpr int64_t kQ8MaxRows = 512;           // rows of xs per task
constexpr int64_t kPanelValues = 128 * 1024;  // weight codes per task (128 KB)
constexpr int64_t kQ8MinBlock = 16;           // fewest weight rows per task: one panel group

// The calling thread's quantized activations.
struct Q8Activations {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};
thread_local Q8Activations q8_activations;

// A worker's panel and fp32 result tile.
struct Q8Scratch {
  std::vector<uint8_t> codes;
  std::vector<float> scales, mins, c;
};
thread_local Q8Scratch q8_scratch;

q8::Dtype q8_dtype(at::ScalarType t) {
  return t == at::kFloat ? q8::Dtype::kFloat32
                         : (t == at::kHalf ? q8::Dtype::kFloat16 : q8::Dtype::kBFloat16);
}

}  // namespace

void moe_qmm_q8_cpu(const at::Tensor& xs, const at::Tensor& w_q, int64_t qtype, int64_t n_in,
                    const int32_t* te, int64_t n_tiles, int64_t tile_m, const at::Tensor& out) {
  const q8::Kernels& kernels = q8_kernels();
  const int format = q8::format_index(qtype);
  TORCH_CHECK_VALUE(format >= 0, "moe_qmm: no q8 CPU kernel for qtype ", qtype);
  const int sub = q8::format_sub(format);
  const bool with_min = q8::format_has_min(format);
  const int64_t N = w_q.size(1);
  const std::vector<QmmChunk> chunks = qmm_row_chunks(te, n_tiles, tile_m, kQ8MaxRows, out);
  if (chunks.empty()) return;

  Q8Activations& act = q8_activations;
  const int64_t R = xs.size(0);
  int8_t* q = grow(act.q, R * n_in);
  float* d = grow(act.d, R * (n_in / q8::kBlock));
  int32_t* sum = grow(act.sum, R * (n_in / 16));
  const q8::Dtype dtype = q8_dtype(xs.scalar_type());
  const char* x = static_cast<const char*>(xs.const_data_ptr());
  const int64_t item = xs.element_size();
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  at::parallel_for(0, n_chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const QmmChunk& ch = chunks[i];
      kernels.quantize(dtype, x + ch.r0 * xs.stride(0) * item, xs.stride(0), xs.stride(1),
                       ch.rows, n_in, q + ch.r0 * n_in, d + ch.r0 * (n_in / q8::kBlock),
                       sum + ch.r0 * (n_in / 16));
    }
  });
  const q8::Rows rows{q, d, sum, n_in};

  const int64_t bn = qmm_weight_block(N, n_in, n_chunks, kPanelValues, kQ8MinBlock, q8::kCols);
  const std::vector<QmmTask> tasks = qmm_tasks(chunks, N, bn);
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  const uint8_t* w_data = w_q.const_data_ptr<uint8_t>();
  const int64_t w_expert_stride = w_q.stride(0), w_row_stride = w_q.stride(1);
  const int64_t ldc = q8::panel_groups(bn) * q8::kCols;
  std::atomic<int64_t> next{0};
  ARGON_DISPATCH_FLOAT(xs.scalar_type(), "moe_qmm", [&] {
    at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
      Q8Scratch& s = q8_scratch;
      q8::Panel panel{grow(s.codes, q8::panel_code_bytes(bn, n_in)),
                      grow(s.scales, q8::panel_scale_floats(bn, n_in)),
                      grow(s.mins, q8::panel_scale_floats(bn, n_in)), 0, n_in};
      float* c = grow(s.c, kQ8MaxRows * ldc);
      for (int64_t t = next.fetch_add(1); t < n_tasks; t = next.fetch_add(1)) {
        const QmmTask& task = tasks[t];
        panel.groups = q8::panel_groups(task.cols);
        kernels.decode[format](w_data + task.expert * w_expert_stride + task.n0 * w_row_stride,
                               w_row_stride, task.cols, panel);
        kernels.gemm(rows, task.r0, task.rows, panel, sub, with_min, c, ldc);
        store_rows(c, ldc, task.rows, task.cols,
                   out.data_ptr<scalar_t>() + task.r0 * N + task.n0, N);
      }
    });
  });
}

}  // namespace argon
