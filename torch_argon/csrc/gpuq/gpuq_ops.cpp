// The gpuq kernels (csrc/gpuq) as torch ops of the `argon` library:
//
//   gpuq_qmm(Tensor a, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m,
//            Tensor? meta=None, Tensor? row_token=None, bool swiglu=False, str activation="silu",
//            str activation_quant="none", bool zero_unused=True) -> Tensor
//   gpuq_qmm_out(<the same>, Tensor(a!) out) -> ()
//       out [R, N] (R = tile_expert.size(0) * tile_m; N = w_q's rows, half of them with swiglu)
//       = a[rows] @ dequantize(w_q[e])^T over the plan's tiles; with row_token (the plan's
//       sorted_token) row r reads a[row_token[r]] (zeros where -1), else a[r]; swiglu:
//       act(gate) * up of w_q = [gate rows; up rows]; meta: tiles at or past meta[n_tiles] are
//       unused; unused tiles' rows are zero (zero_unused) or left as they are.
//       activation_quant "none": a bf16 / fp16, the exact-dequant product (out: a's dtype);
//       "q8": a (bf16 / fp16 / fp32) quantized to 8-bit blocks, int8 MMA (out: a's dtype).
//   gpuq_tiled_qmm(Tensor a, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m,
//                  Tensor? meta=None, Tensor? row_token=None, bool swiglu=False,
//                  str activation="silu", bool zero_unused=True) -> Tensor
//   gpuq_tiled_qmm_out(<the same>, Tensor(a!) out) -> ()
//       gpuq_qmm's product (activation_quant "none") by the tile-decode GEMM
//       (gpuq_tiled_kernel.h): tile_m 64 or 128, a bf16 / fp16; each weight rounded to a's dtype
//       once (bit for bit gpuq_dequantize's value), the products summed in fp32.
//   gpuq_quantize_q8(Tensor x) -> (Tensor q, Tensor d)      quant/activation_q8.py's q8 blocks
//   gpuq_dequantize(Tensor w_q, int qtype, int n_in, ScalarType dtype) -> Tensor
//   gpuq_dequantize_out(Tensor w_q, int qtype, int n_in, Tensor(a!) out) -> ()
//       out [E, N, n_in] (bf16 / fp16; rows dense, any expert and row strides) =
//       dequantize_reference(w_q) rounded once to out's dtype, bit for bit.
//
// The schemas are defined by torch_argon._C. The kernels are registered per build: CUDA (the
// nvcc units) in _C where it is built with CUDA; the host emulation of the same kernel source
// (every lane a fiber) on the CPU key in torch_argon._C_test, the test build, which is how CI
// runs them without a GPU. A user's install has no CPU kernel for these ops (torch_argon.gpuq
// says so before calling them). Fakes (torch.compile, opcheck): torch_argon/gpuq/ops.py.
//
// Every check raises a ValueError naming the argument, the same on both builds, before any
// launch. Misaligned weights or activations are copied to aligned tensors first (the kernels'
// loads are 2- to 4-byte words).
#include <torch/library.h>

#if !defined(ARGON_TEST_MODULE) && defined(ARGON_WITH_CUDA)
#define GPUQ_GLUE_FOR_CUDA 1
#endif
#if defined(ARGON_TEST_MODULE) || defined(GPUQ_GLUE_FOR_CUDA)
#define GPUQ_HAS_KERNELS 1
#endif

#if defined(GPUQ_HAS_KERNELS)
#include <ATen/ATen.h>

#include <cstdlib>
#include <string>

#include "checks.h"
#include "gpuq/gpuq_launch.h"
#include "shared/plan_params.h"
#if defined(GPUQ_GLUE_FOR_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif
#endif

namespace argon::gpuq_ops {
namespace {

#if defined(GPUQ_HAS_KERNELS)
using at::Tensor;
using OptTensor = std::optional<Tensor>;

constexpr int kMaxRowsPerWarp = 32;  // 4 token blocks of 8 (the kernels' NT)

struct FormatLaunchers {
  int type_id;
  int (*gemm)(const gpuq::GemmParams&, const gpuq::GemmVariant&, void*, char*, int);
  int (*decode)(const gpuq::DecodeParams&, void*, char*, int);
  int (*weight_align)();
  int (*gemm_tiled)(const gpuq::GemmParams&, bool, bool, void*, char*, int);
};

const FormatLaunchers kFormats[] = {
#define GPUQ_FORMAT_ROW(lower, UPPER, id, elems, bytes) \
  {id, gpuq::gemm_##UPPER, gpuq::decode_##UPPER, gpuq::weight_align_##UPPER, \
   gpuq::gemm_tiled_##UPPER},
    ARGON_QUANT_FORMATS(GPUQ_FORMAT_ROW)
#undef GPUQ_FORMAT_ROW
};

// The launchers of a format check_qtype accepted (every block format has them).
const FormatLaunchers& launchers(const QuantFormat& fmt) {
  const FormatLaunchers* found = &kFormats[0];
  for (const auto& f : kFormats) {
    if (f.type_id == fmt.type_id) found = &f;
  }
  TORCH_CHECK(found->type_id == fmt.type_id, "gpuq has no kernels for ", fmt.name);
  return *found;
}

void* stream_of(const Tensor& t) {
#if defined(GPUQ_GLUE_FOR_CUDA)
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#else
  (void)t;
  return nullptr;
#endif
}

// The device may run the kernels: on CUDA, compute capability 8.0 or newer (bf16 mma.sync).
void check_device_runs(const Tensor& t) {
#if defined(GPUQ_GLUE_FOR_CUDA)
  int major = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                        t.device().index()));
  TORCH_CHECK_NOT_IMPLEMENTED(major >= 8, "the gpuq kernels need a GPU of compute capability "
                              "8.0 or newer (mma.sync on bf16), this one is ", major, ".x");
#else
  (void)t;
#endif
}

void raise_launch_error(const char* what, int failed, const char* err) {
  TORCH_CHECK(failed == 0, what, ": ", err);
}

bool aligned(const Tensor& t, int64_t align) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % align) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if ((t.stride(d) * t.element_size()) % align) return false;
  }
  return t.dim() == 0 || t.stride(-1) == 1 || t.size(-1) <= 1;
}

// t itself, or a dense copy at a fresh (aligned) address where the kernels could not read it.
Tensor readable(const Tensor& t, int64_t align) {
  return aligned(t, align) ? t : t.clone(at::MemoryFormat::Contiguous);
}

gpuq::FloatKind float_kind(at::ScalarType t) {
  return t == at::kBFloat16 ? gpuq::kBf16 : t == at::kHalf ? gpuq::kFp16 : gpuq::kFp32;
}

int activation_code(c10::string_view activation) {
  TORCH_CHECK_VALUE(activation == "silu" || activation == "gelu" || activation == "gelu_tanh",
                    "activation must be \"silu\", \"gelu\" or \"gelu_tanh\", got \"",
                    std::string(activation), "\"");
  return activation == "silu" ? gpuq::kActSilu
         : activation == "gelu" ? gpuq::kActGelu : gpuq::kActGeluTanh;
}

bool is_q8(c10::string_view activation_quant) {
  TORCH_CHECK_VALUE(activation_quant == "none" || activation_quant == "q8",
                    "activation_quant must be \"none\" or \"q8\" (\"auto\" is the layer's), got "
                    "\"", std::string(activation_quant), "\"");
  return activation_quant == "q8";
}

void check_int32_vector(const OptTensor& t, const char* name, const Tensor& a) {
  if (!t.has_value()) return;
  TORCH_CHECK_VALUE(t->scalar_type() == at::kInt && t->dim() == 1, name,
                    " must be a 1-D int32 tensor (as moe_plan returns it), got ",
                    t->scalar_type(), " of shape ", t->sizes());
  TORCH_CHECK_VALUE(t->device() == a.device(), name, " must be on ", a.device(),
                    " like a, got ", t->device());
}

// ---- gpuq_quantize_q8 ---------------------------------------------------------------------

void quantize_into(const Tensor& x, const Tensor& q, const Tensor& d) {
  if (x.numel() == 0) return;
  char err[512] = "";
  const int failed = gpuq::quantize_q8(x.data_ptr(), x.stride(0), x.size(0),
                                       static_cast<int>(x.size(1)), float_kind(x.scalar_type()),
                                       q.data_ptr<int8_t>(), d.data_ptr<float>(), stream_of(x),
                                       err, sizeof err);
  raise_launch_error("gpuq_quantize_q8", failed, err);
}

std::tuple<Tensor, Tensor> quantize_q8(const Tensor& x_in) {
  TORCH_CHECK_VALUE(x_in.dim() == 2 && x_in.size(1) % 32 == 0,
                    "x must be 2-D [R, n] with n a multiple of 32, got shape ", x_in.sizes());
  TORCH_CHECK_VALUE(is_float_data(x_in.scalar_type()),
                    "x must be float32, float16 or bfloat16, got ", x_in.scalar_type());
  TORCH_CHECK_VALUE(x_in.size(1) <= std::numeric_limits<int32_t>::max(), "x: n=", x_in.size(1),
                    " does not fit in int32");
  check_device_runs(x_in);
  const Tensor x = readable(x_in, x_in.element_size());
  Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  Tensor d = at::empty({x.size(0), x.size(1) / 32}, x.options().dtype(at::kFloat));
  quantize_into(x, q, d);
  return {q, d};
}

// ---- gpuq_qmm ------------------------------------------------------------------------------

struct QmmShape {
  const QuantFormat* fmt;
  int64_t rows;   // R: tile_expert.size(0) * tile_m
  int64_t n_out;  // N, or half of it with swiglu
};

QmmShape check_qmm(const Tensor& a, const Tensor& w_q, int64_t qtype, int64_t n_in,
                   const Tensor& tile_expert, int64_t tile_m, const OptTensor& meta,
                   const OptTensor& row_token, bool swiglu, bool q8) {
  const QuantFormat& fmt = check_qtype(qtype);
  check_quantized_weight(w_q, fmt, n_in, 3, "[E, N, row_bytes]");
  TORCH_CHECK_VALUE(a.dim() == 2 && a.size(1) == n_in, "a must be 2-D [rows, n_in] with n_in = ",
                    n_in, " (the weights' input dim), got shape ", a.sizes());
  const bool half = a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf;
  TORCH_CHECK_VALUE(half || (q8 && a.scalar_type() == at::kFloat), "a must be bfloat16 or "
                    "float16", q8 ? " (or float32 with activation_quant=\"q8\")" : "", ", got ",
                    a.scalar_type());
  TORCH_CHECK_VALUE(w_q.device() == a.device(), "w_q must be on ", a.device(), " like a, got ",
                    w_q.device());
  TORCH_CHECK_VALUE(!swiglu || w_q.size(1) % 2 == 0, "w_q must be [E, 2I, row_bytes] (gate rows, "
                    "then up rows) with swiglu, got shape ", w_q.sizes());
  TORCH_CHECK_VALUE(tile_m >= 1 && (tile_m & (tile_m - 1)) == 0,
                    "tile_m must be a power of two, got ", tile_m);
  check_int32_vector(tile_expert, "tile_expert", a);
  check_int32_vector(meta, "meta", a);
  check_int32_vector(row_token, "row_token", a);
  TORCH_CHECK_VALUE(!meta.has_value() || meta->size(0) >= ARGON_META_SIZE, "meta must hold "
                    "moe_plan's ", ARGON_META_SIZE, " counters, got ", meta->size(0));
  const int64_t rows = tile_expert.size(0) * tile_m;
  if (row_token.has_value()) {
    TORCH_CHECK_VALUE(row_token->size(0) == rows, "row_token must have tile_expert.size(0) * "
                      "tile_m = ", rows, " rows (the plan's sorted_token), got ",
                      row_token->size(0));
  } else {
    TORCH_CHECK_VALUE(a.size(0) == rows, "a must have tile_expert.size(0) * tile_m = ", rows,
                      " rows (the plan's rows) when no row_token is given, got ", a.size(0));
  }
  TORCH_CHECK_VALUE(rows / std::min<int64_t>(tile_m, kMaxRowsPerWarp) <=
                        std::numeric_limits<int32_t>::max() &&
                    a.size(0) <= std::numeric_limits<int32_t>::max() &&
                    tile_expert.size(0) <= std::numeric_limits<int32_t>::max(),
                    "the plan's rows do not fit in int32");
  return {&fmt, rows, swiglu ? w_q.size(1) / 2 : w_q.size(1)};
}

// out's shape, dtype, layout and device, and that it overlaps none of the inputs.
void check_qmm_out(const Tensor& out, const Tensor& a, const Tensor& w_q,
                   const Tensor& tile_expert, const OptTensor& meta, const OptTensor& row_token,
                   const QmmShape& s) {
  TORCH_CHECK_VALUE(out.dim() == 2 && out.size(0) == s.rows && out.size(1) == s.n_out,
                    "out must have shape [", s.rows, ", ", s.n_out, "], got ", out.sizes());
  TORCH_CHECK_VALUE(out.scalar_type() == a.scalar_type(), "out must be ", a.scalar_type(),
                    " like a, got ", out.scalar_type());
  TORCH_CHECK_VALUE(out.is_contiguous(), "out must be contiguous (pass a fresh torch.empty "
                    "buffer)");
  TORCH_CHECK_VALUE(out.device() == a.device(), "out must be on ", a.device(), " like a, got ",
                    out.device());
  const Tensor none;
  check_no_overlap({{"out", &out}},
                   {{"a", &a}, {"w_q", &w_q}, {"tile_expert", &tile_expert},
                    {"meta", meta ? &*meta : &none},
                    {"row_token", row_token ? &*row_token : &none}});
}

// The K loop of the GEMMs (gpuq_launch.h): ARGON_GPUQ_LOOP=pipelined or smem_act runs that
// loop of a lab build (GPUQ_LAB_LOOPS=1) or the emulation, so that a benchmark or a test
// compares the loops in one process (bench/lab/gpuq_loops.py); unset or "plain": the plain
// loop, the only one a user's build has. Read at each call (the host's side of a launch; a CUDA
// graph keeps the kernel it captured).
gpuq::KLoop k_loop() {
  const char* loop = std::getenv("ARGON_GPUQ_LOOP");
  if (loop == nullptr || *loop == 0 || std::string(loop) == "plain") return gpuq::kLoopPlain;
  if (std::string(loop) == "pipelined") return gpuq::kLoopPipelined;
  TORCH_CHECK_VALUE(std::string(loop) == "smem_act", "ARGON_GPUQ_LOOP must be \"plain\", "
                    "\"pipelined\" or \"smem_act\", got \"", loop, "\"");
  return gpuq::kLoopSmemAct;
}

// The 8-token blocks a warp multiplies: its rows (the tile, at most 32) in blocks of 8.
int token_blocks(int rows_per_warp) { return rows_per_warp <= 8 ? 1 : rows_per_warp <= 16 ? 2 : 4; }

// The launch arguments both GEMMs take from the checked tensors (x: the activations as the
// kernels read them; q8's scales and gpuq's rows per warp are the caller's to add).
gpuq::GemmParams gemm_params(const Tensor& x, const Tensor& w_q, const QmmShape& s, int64_t n_in,
                             const Tensor& tile_expert, int64_t tile_m, const OptTensor& meta,
                             const OptTensor& row_token, int act, bool zero_unused,
                             const Tensor& out) {
  gpuq::GemmParams p{};
  p.x = x.data_ptr();
  p.x_stride = x.stride(0) * x.element_size();
  p.row_token = row_token ? row_token->data_ptr<int32_t>() : nullptr;
  p.w = w_q.data_ptr<uint8_t>();
  p.w_stride_e = w_q.stride(0);
  p.w_stride_n = w_q.stride(1);
  p.out = out.data_ptr();
  p.out_stride = out.stride(0);
  p.tile_expert = tile_expert.data_ptr<int32_t>();
  p.meta = meta ? meta->data_ptr<int32_t>() : nullptr;
  p.n_out = static_cast<int32_t>(s.n_out);
  p.n_in = static_cast<int32_t>(n_in);
  p.n_blocks = static_cast<int32_t>(n_in / s.fmt->block_elems);
  p.tile_m = static_cast<int32_t>(tile_m);
  p.n_expert = static_cast<int32_t>(w_q.size(0));
  p.n_a_rows = static_cast<int32_t>(x.size(0));
  p.n_tiles_all = static_cast<int32_t>(tile_expert.size(0));
  p.activation = act;
  p.zero_unused = zero_unused;
  p.meta_n_tiles_index = ARGON_META_N_TILES;
  p.out_kind = float_kind(out.scalar_type());
  p.row_group0 = 0;
  return p;
}

void qmm_out(const Tensor& a_in, const Tensor& w_q_in, int64_t qtype, int64_t n_in,
             const Tensor& tile_expert, int64_t tile_m, const OptTensor& meta,
             const OptTensor& row_token, bool swiglu, c10::string_view activation,
             c10::string_view activation_quant, bool zero_unused, const Tensor& out) {
  const bool q8 = is_q8(activation_quant);
  const int act = activation_code(activation);
  const QmmShape s = check_qmm(a_in, w_q_in, qtype, n_in, tile_expert, tile_m, meta, row_token,
                               swiglu, q8);
  check_qmm_out(out, a_in, w_q_in, tile_expert, meta, row_token, s);
  if (s.rows == 0 || s.n_out == 0) return;
  check_device_runs(a_in);
#if defined(GPUQ_GLUE_FOR_CUDA)
  const c10::cuda::CUDAGuard guard(a_in.device());
#endif
  const FormatLaunchers& fmt = launchers(*s.fmt);
  const Tensor w_q = readable(w_q_in, fmt.weight_align());
  const gpuq::KLoop loop = k_loop();
  const int rows_per_warp = static_cast<int>(std::min<int64_t>(tile_m, kMaxRowsPerWarp));
  const int nt = token_blocks(rows_per_warp);
  // the smem_act loop stages rows by 16-byte copies (its 8-token calls run the plain loop)
  const bool copies_16 = loop == gpuq::kLoopSmemAct && nt >= 2;
  Tensor x, x_scale;
  if (q8) {
    x = at::empty(a_in.sizes(), a_in.options().dtype(at::kChar));
    x_scale = at::empty({a_in.size(0), n_in / 32}, a_in.options().dtype(at::kFloat));
    quantize_into(readable(a_in, a_in.element_size()), x, x_scale);
  } else {
    // one 64-bit load per 4 values; the smem_act loop's copies: 16 bytes
    x = readable(a_in, copies_16 ? 16 : 8);
  }
  // q8's codes are a fresh dense tensor (rows of n_in bytes, n_in a multiple of 32)
  TORCH_INTERNAL_ASSERT(!copies_16 || aligned(x, 16), "gpuq_qmm: activations not 16-byte aligned");
  gpuq::GemmParams p = gemm_params(x, w_q, s, n_in, tile_expert, tile_m, meta, row_token, act,
                                   zero_unused, out);
  p.x_scale = q8 ? x_scale.data_ptr<float>() : nullptr;
  p.x_scale_stride = q8 ? x_scale.stride(0) : 0;
  p.rows_per_warp = rows_per_warp;
  const gpuq::GemmVariant v{nt, swiglu, q8, a_in.scalar_type() == at::kBFloat16, loop};
  char err[512] = "";
  raise_launch_error("gpuq_qmm", fmt.gemm(p, v, stream_of(a_in), err, sizeof err), err);
}

Tensor qmm(const Tensor& a, const Tensor& w_q, int64_t qtype, int64_t n_in,
           const Tensor& tile_expert, int64_t tile_m, const OptTensor& meta,
           const OptTensor& row_token, bool swiglu, c10::string_view activation,
           c10::string_view activation_quant, bool zero_unused) {
  const QmmShape s = check_qmm(a, w_q, qtype, n_in, tile_expert, tile_m, meta, row_token, swiglu,
                               is_q8(activation_quant));
  Tensor out = at::empty({s.rows, s.n_out}, a.options());
  qmm_out(a, w_q, qtype, n_in, tile_expert, tile_m, meta, row_token, swiglu, activation,
          activation_quant, zero_unused, out);
  return out;
}

// ---- gpuq_tiled_qmm -------------------------------------------------------------------------

void tiled_qmm_out(const Tensor& a_in, const Tensor& w_q_in, int64_t qtype, int64_t n_in,
                   const Tensor& tile_expert, int64_t tile_m, const OptTensor& meta,
                   const OptTensor& row_token, bool swiglu, c10::string_view activation,
                   bool zero_unused, const Tensor& out) {
  const int act = activation_code(activation);
  const QmmShape s = check_qmm(a_in, w_q_in, qtype, n_in, tile_expert, tile_m, meta, row_token,
                               swiglu, false);
  TORCH_CHECK_VALUE(tile_m == 64 || tile_m == 128, "tile_m must be 64 or 128 (the tile-decode "
                    "GEMM's tiles), got ", tile_m);
  check_qmm_out(out, a_in, w_q_in, tile_expert, meta, row_token, s);
  if (s.rows == 0 || s.n_out == 0) return;
  check_device_runs(a_in);
#if defined(GPUQ_GLUE_FOR_CUDA)
  const c10::cuda::CUDAGuard guard(a_in.device());
#endif
  const FormatLaunchers& fmt = launchers(*s.fmt);
  const Tensor w_q = readable(w_q_in, fmt.weight_align());
  const Tensor x = readable(a_in, 16);  // 16-byte cp.async copies of the rows
  const gpuq::GemmParams p = gemm_params(x, w_q, s, n_in, tile_expert, tile_m, meta, row_token,
                                         act, zero_unused, out);
  char err[512] = "";
  raise_launch_error("gpuq_tiled_qmm",
                     fmt.gemm_tiled(p, swiglu, a_in.scalar_type() == at::kBFloat16,
                                    stream_of(a_in), err, sizeof err),
                     err);
}

Tensor tiled_qmm(const Tensor& a, const Tensor& w_q, int64_t qtype, int64_t n_in,
                 const Tensor& tile_expert, int64_t tile_m, const OptTensor& meta,
                 const OptTensor& row_token, bool swiglu, c10::string_view activation,
                 bool zero_unused) {
  const QmmShape s = check_qmm(a, w_q, qtype, n_in, tile_expert, tile_m, meta, row_token, swiglu,
                               false);
  Tensor out = at::empty({s.rows, s.n_out}, a.options());
  tiled_qmm_out(a, w_q, qtype, n_in, tile_expert, tile_m, meta, row_token, swiglu, activation,
                zero_unused, out);
  return out;
}

// ---- gpuq_dequantize -----------------------------------------------------------------------

void dequantize_out(const Tensor& w_q_in, int64_t qtype, int64_t n_in, const Tensor& out) {
  const QuantFormat& qf = check_qtype(qtype);
  check_quantized_weight(w_q_in, qf, n_in, 3, "[E, N, row_bytes]");
  TORCH_CHECK_VALUE(out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf,
                    "out must be bfloat16 or float16, got ", out.scalar_type());
  TORCH_CHECK_VALUE(out.dim() == 3 && out.size(0) == w_q_in.size(0) &&
                        out.size(1) == w_q_in.size(1) && out.size(2) == n_in,
                    "out must have shape [", w_q_in.size(0), ", ", w_q_in.size(1), ", ", n_in,
                    "] (w_q's experts and rows, n_in values a row), got ", out.sizes());
  TORCH_CHECK_VALUE(out.stride(2) == 1 || n_in <= 1, "out's rows must be dense (stride 1 along "
                    "n_in), got strides ", out.strides());
  TORCH_CHECK_VALUE(out.device() == w_q_in.device(), "out must be on ", w_q_in.device(),
                    " like w_q, got ", out.device());
  check_no_overlap({{"out", &out}}, {{"w_q", &w_q_in}});
  TORCH_CHECK_VALUE(w_q_in.size(0) <= std::numeric_limits<int32_t>::max() &&
                        w_q_in.size(1) <= std::numeric_limits<int32_t>::max(),
                    "w_q's experts and rows must fit in int32, got shape ", w_q_in.sizes());
  if (out.numel() == 0) return;
  check_device_runs(w_q_in);
#if defined(GPUQ_GLUE_FOR_CUDA)
  const c10::cuda::CUDAGuard guard(w_q_in.device());
#endif
  const FormatLaunchers& fmt = launchers(qf);
  const Tensor w_q = readable(w_q_in, fmt.weight_align());
  gpuq::DecodeParams p{};
  p.w = w_q.data_ptr<uint8_t>();
  p.w_stride_e = w_q.stride(0);
  p.w_stride_n = w_q.stride(1);
  p.out = out.data_ptr();
  p.out_stride_e = out.stride(0);
  p.out_stride_n = out.stride(1);
  p.n_expert = static_cast<int32_t>(w_q.size(0));
  p.n_rows = static_cast<int32_t>(w_q.size(1));
  p.n_in = static_cast<int32_t>(n_in);
  p.out_kind = float_kind(out.scalar_type());
  p.vector_stores = reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0 &&
                    (out.stride(0) * 2) % 16 == 0 && (out.stride(1) * 2) % 16 == 0;
  char err[512] = "";
  raise_launch_error("gpuq_dequantize", fmt.decode(p, stream_of(w_q), err, sizeof err), err);
}

Tensor dequantize(const Tensor& w_q, int64_t qtype, int64_t n_in, at::ScalarType dtype) {
  check_quantized_weight(w_q, check_qtype(qtype), n_in, 3, "[E, N, row_bytes]");
  Tensor out = at::empty({w_q.size(0), w_q.size(1), n_in}, w_q.options().dtype(dtype));
  dequantize_out(w_q, qtype, n_in, out);
  return out;
}

void register_kernels(torch::Library& m) {
  m.impl("gpuq_qmm", TORCH_FN(qmm));
  m.impl("gpuq_qmm_out", TORCH_FN(qmm_out));
  m.impl("gpuq_tiled_qmm", TORCH_FN(tiled_qmm));
  m.impl("gpuq_tiled_qmm_out", TORCH_FN(tiled_qmm_out));
  m.impl("gpuq_quantize_q8", TORCH_FN(quantize_q8));
  m.impl("gpuq_dequantize", TORCH_FN(dequantize));
  m.impl("gpuq_dequantize_out", TORCH_FN(dequantize_out));
}
#endif  // GPUQ_HAS_KERNELS

}  // namespace
}  // namespace argon::gpuq_ops

#if !defined(ARGON_TEST_MODULE)
TORCH_LIBRARY_FRAGMENT(argon, m) {
  m.def(
      "gpuq_qmm(Tensor a, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m, "
      "Tensor? meta=None, Tensor? row_token=None, bool swiglu=False, str activation=\"silu\", "
      "str activation_quant=\"none\", bool zero_unused=True) -> Tensor");
  m.def(
      "gpuq_qmm_out(Tensor a, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m, "
      "Tensor? meta, Tensor? row_token, bool swiglu, str activation, str activation_quant, "
      "bool zero_unused, Tensor(a!) out) -> ()");
  m.def(
      "gpuq_tiled_qmm(Tensor a, Tensor w_q, int qtype, int n_in, Tensor tile_expert, int tile_m, "
      "Tensor? meta=None, Tensor? row_token=None, bool swiglu=False, str activation=\"silu\", "
      "bool zero_unused=True) -> Tensor");
  m.def(
      "gpuq_tiled_qmm_out(Tensor a, Tensor w_q, int qtype, int n_in, Tensor tile_expert, "
      "int tile_m, Tensor? meta, Tensor? row_token, bool swiglu, str activation, "
      "bool zero_unused, Tensor(a!) out) -> ()");
  m.def("gpuq_quantize_q8(Tensor x) -> (Tensor, Tensor)");
  m.def("gpuq_dequantize(Tensor w_q, int qtype, int n_in, ScalarType dtype) -> Tensor");
  m.def("gpuq_dequantize_out(Tensor w_q, int qtype, int n_in, Tensor(a!) out) -> ()");
}
#if defined(GPUQ_GLUE_FOR_CUDA)
TORCH_LIBRARY_IMPL(argon, CUDA, m) { argon::gpuq_ops::register_kernels(m); }
#endif
#else
// torch_argon._C_test: the host emulation on CPU tensors.
TORCH_LIBRARY_IMPL(argon, CPU, m) { argon::gpuq_ops::register_kernels(m); }
#endif
