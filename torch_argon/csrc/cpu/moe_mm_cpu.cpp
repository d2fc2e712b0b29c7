// moe_mm on the CPU: out[rows of tile j] = xs[rows] @ w[tile_expert[j]]^T. Consecutive tiles of
// one expert (the plan lays them out so) form one segment; tiles whose expert is -1 are written
// with zeros. The GEMMs are torch's (MKL's sgemm for fp32); we choose how they are called.
//
// Why not one threaded at::mm per expert (this file's first version, and what a per-expert loop
// does): with T*K/E rows per expert (128 at T = 2048, K = 8, E = 128) each GEMM is too small for
// its two-thread split to pay, and 2 * E fork/join barriers per layer stall whenever the machine
// is busy. So the work is cut into blocks of at most kBlockRows rows of one expert, taken by the
// threads of ONE parallel region in order of size (largest first, from a shared counter), each
// block a single-threaded GEMM (MKL runs on one thread inside a parallel region).
//
// fp16 / bf16 where torch has no oneDNN kernel for the dtype (CPUs without AVX-512 or AMX), or the
// CPU variant in use (cpu_isa.h) is below avx512: torch's fallback GEMM for them is scalar, about
// 25x slower than sgemm on AVX2 (measured: 128x1024x512, 55 ms against 2.1 ms). There we widen: a block's rows and its expert's weights are converted to
// fp32 in per-thread workspaces (reused across calls: no fresh pages), multiplied by sgemm, and
// rounded once to the output dtype. The products of two 16-bit floats are exact in fp32 and the
// sums are fp32, as in torch's own reduced-precision GEMMs; only the order of the sums differs.
//
// Determinism: a block's result depends only on its rows and expert (never on which thread took
// it), and the blocks are a function of the plan, so the same inputs give the same bytes.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "../checks.h"
#include "../float_dispatch.h"
#include "../op_signatures.h"
#include "cpu_clones.h"
#include "cpu_isa.h"

namespace argon {
namespace {

// Rows per work item: large enough for sgemm to run near its peak (M >= 128), small enough that
// one expert holding most rows still spreads over the threads.
constexpr int64_t kBlockRows = 256;

struct MmBlock {
  int64_t row0, rows, expert;
};

// Whether torch multiplies `dtype` through oneDNN (AVX-512 / AMX kernels) on this CPU, asked the
// way torch itself decides (torch.ops.mkldnn._is_mkldnn_{bf16,fp16}_supported), and the CPU
// variant in use is avx512 or above; if not, moe_mm widens to fp32 instead. On an AVX-512-BF16
// CPU (Zen 4) torch's bf16 GEMM runs at 2.1-2.4x its fp32 sgemm for 32-2048 rows of 768-2048
// (bench/cpu_isa_notes.md), so there its native GEMM is the route.
bool torch_has_fast_gemm(at::ScalarType dtype) {
  if (dtype == at::kFloat) return true;
  if (cpu_isa() < CpuIsa::kAvx512) return false;
  auto ask = [](const char* op) {
    try {
      auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, "").typed<bool()>();
      return handle.call();
    } catch (const c10::Error&) {
      return false;  // a torch built without oneDNN
    }
  };
  static const bool bf16 = ask("mkldnn::_is_mkldnn_bf16_supported");
  static const bool fp16 = ask("mkldnn::_is_mkldnn_fp16_supported");
  return at::globalContext().userEnabledMkldnn() && (dtype == at::kBFloat16 ? bf16 : fp16);
}

// dst[r * cols + c] = float(src[r * row_stride + c * col_stride]).
template <typename T>
ARGON_CPU_CLONES void widen_rows(const T* src, int64_t row_stride, int64_t col_stride, float* dst,
                                 int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * row_stride;
    float* d = dst + r * cols;
    if (col_stride == 1) {
      for (int64_t c = 0; c < cols; ++c) d[c] = static_cast<float>(s[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c] = static_cast<float>(s[c * col_stride]);
    }
  }
}

// dst = src rounded to T (to nearest even), n contiguous values.
template <typename T>
ARGON_CPU_CLONES void narrow_values(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

// A thread's fp32 workspaces, grown as needed and kept across calls.
struct WidenWorkspace {
  std::vector<float> a, w, c;
  const void* w_src = nullptr;  // the expert matrix now held in `w` (valid within one call only)
};

WidenWorkspace& widen_workspace() {
  static thread_local WidenWorkspace ws;
  return ws;
}

at::Tensor as_matrix(float* data, int64_t rows, int64_t cols) {
  return at::from_blob(data, {rows, cols}, at::TensorOptions().dtype(at::kFloat));
}

// out[b.row0 : b.row0 + b.rows] = xs[same rows] @ w[b.expert]^T through fp32 workspaces.
template <typename T>
void widened_block(const at::Tensor& xs, const at::Tensor& w, const MmBlock& b, const at::Tensor& out) {
  const int64_t Kd = xs.size(1), N = w.size(1);
  WidenWorkspace& ws = widen_workspace();
  ws.a.resize(std::max<size_t>(ws.a.size(), b.rows * Kd));
  ws.c.resize(std::max<size_t>(ws.c.size(), b.rows * N));
  const T* w_src = w.const_data_ptr<T>() + b.expert * w.stride(0);
  if (ws.w_src != w_src) {  // consecutive blocks of one expert convert its weights once
    ws.w.resize(std::max<size_t>(ws.w.size(), N * Kd));
    widen_rows(w_src, w.stride(1), w.stride(2), ws.w.data(), N, Kd);
    ws.w_src = w_src;
  }
  widen_rows(xs.const_data_ptr<T>() + b.row0 * xs.stride(0), xs.stride(0), xs.stride(1),
             ws.a.data(), b.rows, Kd);
  at::Tensor c = as_matrix(ws.c.data(), b.rows, N);
  at::cpu::mm_out(c, as_matrix(ws.a.data(), b.rows, Kd), as_matrix(ws.w.data(), N, Kd).t());
  narrow_values(ws.c.data(), out.data_ptr<T>() + b.row0 * N, b.rows * N);
}

void moe_mm_out_cpu(const Tensor& xs, const Tensor& w, const Tensor& tile_expert_in,
                    int64_t tile_m, const Tensor& out) {
  check_moe_mm(xs, w, tile_expert_in, tile_m, out);
  const Tensor tile_expert = tile_expert_in.contiguous();
  const int32_t* te = tile_expert.const_data_ptr<int32_t>();
  const int64_t n_tiles = tile_expert.size(0), E = w.size(0);
  for (int64_t j = 0; j < n_tiles; ++j) {
    TORCH_CHECK_VALUE(te[j] >= -1 && te[j] < E, "tile_expert[", j, "] = ", te[j],
                " is out of range: expected -1 or an expert of w in [0, ", E, ")");
  }
  if (out.numel() == 0) return;
  std::vector<MmBlock> blocks;
  for (int64_t j0 = 0; j0 < n_tiles;) {
    int64_t j1 = j0 + 1;
    while (j1 < n_tiles && te[j1] == te[j0]) ++j1;
    const int64_t row0 = j0 * tile_m, rows = (j1 - j0) * tile_m;
    if (te[j0] < 0 || xs.size(1) == 0) {
      out.narrow(0, row0, rows).zero_();  // skipped tiles (and an empty sum) are zeros
    } else {
      for (int64_t r = 0; r < rows; r += kBlockRows) {
        blocks.push_back({row0 + r, std::min(kBlockRows, rows - r), te[j0]});
      }
    }
    j0 = j1;
  }
  // Largest first, so the last blocks taken are small and the threads finish together; ties in
  // row order, so consecutive blocks of one expert stay adjacent (its weights stay converted).
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const MmBlock& a, const MmBlock& b) { return a.rows > b.rows; });
  const bool widen = !torch_has_fast_gemm(xs.scalar_type());
  const int64_t n_blocks = static_cast<int64_t>(blocks.size());
  std::atomic<int64_t> next{0};
  // The caller's thread-local state (inference mode, grad mode) in every worker thread, as any
  // op the GEMM calls on its way (a copy of a strided operand) must see it. The GEMM itself is
  // at::cpu::mm_out, torch's CPU kernel without the dispatcher's autograd layers: 2 * E calls.
  const at::ThreadLocalState caller_state;
  auto run_blocks = [&](int64_t, int64_t) {
    at::ThreadLocalStateGuard state_guard(caller_state);
    if (widen) widen_workspace().w_src = nullptr;  // another call's weights may sit at that address
    for (int64_t i; (i = next.fetch_add(1)) < n_blocks;) {
      const MmBlock& b = blocks[i];
      if (!widen) {
        Tensor dst = out.narrow(0, b.row0, b.rows);
        at::cpu::mm_out(dst, xs.narrow(0, b.row0, b.rows), w.select(0, b.expert).t());
      } else if (xs.scalar_type() == at::kBFloat16) {
        widened_block<c10::BFloat16>(xs, w, b, out);
      } else {
        widened_block<c10::Half>(xs, w, b, out);
      }
    }
  };
  // One task per thread; each takes blocks from `next` until none is left.
  const int64_t n_tasks = std::min<int64_t>(at::get_num_threads(), n_blocks);
  if (n_tasks <= 1) {
    run_blocks(0, 1);
  } else {
    at::parallel_for(0, n_tasks, 1, run_blocks);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CPU, m) { m.impl("moe_mm_out", TORCH_FN(moe_mm_out_cpu)); }

}  // namespace argon
