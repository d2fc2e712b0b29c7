// The launchers of one GGUF format's gpuq kernels (gpuq_launch.h): its GEMM in every variant and
// its decode. A generated unit (build_tools/gpuq_codegen.py) defines GPUQ_FORMAT_NAME (Q4_K, ...)
// and includes this file, once per format, so the formats compile in parallel; nvcc builds the
// units for the GPU, the host compiler for the emulation (every lane a fiber:
// gpuq_host_runtime.h), from the same source.
#include <cstdio>
#include <string>
#include <type_traits>

#include "gpuq/gpuq_decode.h"
#include "gpuq/gpuq_kernel.h"
#include "gpuq/gpuq_launch.h"

#define GPUQ_CAT2(a, b) a##b
#define GPUQ_CAT(a, b) GPUQ_CAT2(a, b)

namespace gpuq {
inline namespace GPUQ_TARGET {
namespace {

using Format = GPUQ_CAT(Fmt, GPUQ_FORMAT_NAME);

// The format's block as the kernels read it is the block of the shared format table.
#define GPUQ_CHECK_BLOCK(lower, UPPER, id, elems, bytes)                                      \
  static_assert(!std::is_same<Format, Fmt##UPPER>::value ||                                   \
                    (Format::BE == (elems) && Format::BB == (bytes)),                        \
                "gpuq_formats.h disagrees with ARGON_QUANT_FORMATS on " #UPPER "'s block");
ARGON_QUANT_FORMATS(GPUQ_CHECK_BLOCK)
#undef GPUQ_CHECK_BLOCK

constexpr int64_t kMaxGridY = 65535;

// The lab K loops (pipelined, smem_act) are built where they can be tested or measured: always
// in the emulation, in the GPU build only with GPUQ_LAB_LOOPS=1 (until a device run measures
// one faster, the plain loop is the only one a user's build compiles: one instantiation per
// variant, not three).
#if !defined(__CUDACC__) || (defined(GPUQ_LAB_LOOPS) && GPUQ_LAB_LOOPS)
constexpr bool kHasLabLoops = true;
#else
constexpr bool kHasLabLoops = false;
#endif

int report(char* err, int err_len, const char* what) {
  if (err && err_len > 0) std::snprintf(err, err_len, "%s", what);
  return 1;
}

#if defined(__CUDACC__)
int check_launch(char* err, int err_len) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : report(err, err_len, cudaGetErrorString(e));
}
#endif

template <bool BF16, int NT, bool SWIGLU, bool Q8, int LOOP>
int run(const GemmParams& p, void* stream, char* err, int err_len) {
  constexpr int WN = SWIGLU ? 1 : 2;
  const int cols_per_block = kWarps * 16 * WN;
  const int gx = (p.n_out + cols_per_block - 1) / cols_per_block;
  const int64_t rows = static_cast<int64_t>(p.n_tiles_all) * p.tile_m;
  const int64_t groups = rows / p.rows_per_warp;
  // grid y is at most 65535: more row groups take several launches, each from row_group0 on
  for (int64_t first = 0; first < groups && gx > 0; first += kMaxGridY) {
    GemmParams part = p;
    part.row_group0 = static_cast<int32_t>(first);
    const int gy = static_cast<int>(groups - first < kMaxGridY ? groups - first : kMaxGridY);
#if defined(__CUDACC__)
    qmm_kernel<Format, BF16, NT, SWIGLU, Q8, LOOP>
        <<<dim3(gx, gy), kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(part);
    if (check_launch(err, err_len)) return 1;
#else
    (void)stream;
    const std::string e = host::launch(gx, gy, kWarps * 32, [&part] {
      qmm_kernel<Format, BF16, NT, SWIGLU, Q8, LOOP>(part);
    });
    if (!e.empty()) return report(err, err_len, e.c_str());
#endif
  }
  return 0;
}

template <bool BF16, bool SWIGLU, bool Q8, int LOOP>
int run_nt(const GemmParams& p, int nt, void* stream, char* err, int err_len) {
  // the 8-token kernels stage nothing in shared memory: smem_act runs the plain loop there
  constexpr int LOOP1 = LOOP == kLoopSmemAct ? kLoopPlain : LOOP;
  switch (nt) {
    case 1: return run<BF16, 1, SWIGLU, Q8, LOOP1>(p, stream, err, err_len);
    case 2: return run<BF16, 2, SWIGLU, Q8, LOOP>(p, stream, err, err_len);
    case 4: return run<BF16, 4, SWIGLU, Q8, LOOP>(p, stream, err, err_len);
    default: return report(err, err_len, "gpuq: token blocks per warp must be 1, 2 or 4");
  }
}

template <bool BF16, bool SWIGLU, bool Q8>
int run_loop(const GemmParams& p, const GemmVariant& v, void* stream, char* err, int err_len) {
  if (v.loop == kLoopPlain) {
    return run_nt<BF16, SWIGLU, Q8, kLoopPlain>(p, v.token_blocks, stream, err, err_len);
  }
  if constexpr (kHasLabLoops) {
    return v.loop == kLoopPipelined
               ? run_nt<BF16, SWIGLU, Q8, kLoopPipelined>(p, v.token_blocks, stream, err, err_len)
               : run_nt<BF16, SWIGLU, Q8, kLoopSmemAct>(p, v.token_blocks, stream, err, err_len);
  } else {
    return report(err, err_len, v.loop == kLoopPipelined
                  ? "gpuq: this build has no pipelined K loop (a lab build has it: "
                    "NVCC_APPEND_FLAGS=-DGPUQ_LAB_LOOPS=1)"
                  : "gpuq: this build has no smem_act K loop (a lab build has it: "
                    "NVCC_APPEND_FLAGS=-DGPUQ_LAB_LOOPS=1)");
  }
}

}  // namespace

int GPUQ_CAT(gemm_, GPUQ_FORMAT_NAME)(const GemmParams& p, const GemmVariant& v, void* stream,
                                      char* err, int err_len) {
  if (v.q8) {  // the MMA is int8 either way: one instantiation, out's type chosen at the store
    return v.swiglu ? run_loop<true, true, true>(p, v, stream, err, err_len)
                    : run_loop<true, false, true>(p, v, stream, err, err_len);
  }
  if (v.bf16) {
    return v.swiglu ? run_loop<true, true, false>(p, v, stream, err, err_len)
                    : run_loop<true, false, false>(p, v, stream, err, err_len);
  }
  return v.swiglu ? run_loop<false, true, false>(p, v, stream, err, err_len)
                  : run_loop<false, false, false>(p, v, stream, err, err_len);
}

int GPUQ_CAT(weight_align_, GPUQ_FORMAT_NAME)() { return Format::ALIGN; }

namespace {
template <bool BF16, bool VEC>
int decode(const DecodeParams& p, uint32_t chunks, void* stream, char* err, int err_len) {
#if defined(__CUDACC__)
  const uint32_t blocks = (chunks + kDecodeThreads - 1) / kDecodeThreads;
  decode_kernel<Format, BF16, VEC>
      <<<blocks, kDecodeThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, chunks);
  return check_launch(err, err_len);
#else
  (void)stream;
  (void)err;
  (void)err_len;
  for (uint32_t i = 0; i < chunks; ++i) decode_chunk<Format, BF16, VEC>(p, i);
  return 0;
#endif
}
}  // namespace

int GPUQ_CAT(decode_, GPUQ_FORMAT_NAME)(const DecodeParams& p, void* stream, char* err,
                                        int err_len) {
  const int64_t chunks = static_cast<int64_t>(p.n_expert) * p.n_rows * (p.n_in / 32);
  if (chunks == 0) return 0;
  if (chunks > 0xFFFFFFFFll) return report(err, err_len, "gpuq decode: 2^32 chunks or more");
  const auto n = static_cast<uint32_t>(chunks);
  if (p.out_kind == kBf16) {
    return p.vector_stores ? decode<true, true>(p, n, stream, err, err_len)
                           : decode<true, false>(p, n, stream, err, err_len);
  }
  return p.vector_stores ? decode<false, true>(p, n, stream, err, err_len)
                         : decode<false, false>(p, n, stream, err, err_len);
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
