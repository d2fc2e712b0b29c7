// The padded Hopper gate/up GEMM with the activation in its epilogue (csrc/hopper/
// hopper_padded_gemm.h's argon_hopper_padded_act_gemm) checked and timed on a GPU without torch
// or the extension, beside the plain padded GEMM (argon_hopper_padded_gemm) it must agree with:
// a binary of the two entries, their eight units and this file, built here with nvcc and carried
// to a device whose session has no time for the extension's build.
//
// Checks, for fp16 and bf16, both configurations (pingpong_128x128, cooperative_128x256) and
// every activation the entry takes (silu, gelu, gelu_tanh: the `activation` field, ARGON_ACT_*),
// on E=5 experts, I=200 (2I = 400: the last N tile clipped by the TMA bounds in both
// configurations), K=264 (a K tail), 6 tiles of which 5 used, tile 2's expert 7 and tile 4's
// expert -1 out of range, tile 1's last 50 rows zeros (a plan's padding rows):
//   1. h of the fused GEMM (weights interleaved in blocks of 8, padded_ops.py interleave_gate_up)
//      bit for bit the unfused path's: the plain GEMM on the original stack (gate rows [0, I),
//      up rows [I, 2I)) into gu [R, 2I] on the GPU, then swiglu on gu. Twice: (a) on the GPU,
//      a kernel of this file computing what csrc/cuda/swiglu_cuda.cu computes (argon_gated
//      <CudaMath> of csrc/shared/activation.h on gate and up read back from the dtype, one
//      round to nearest even; this file is compiled with --fmad=false as that kernel is): must
//      match every bit; (b) on the host, the same header's argon_gated<CudaMath>, whose expf /
//      erff / tanhf are then the host libm's, not CUDA's (which are within 2 ulp of fp32, not
//      correctly rounded): the values that differ and the largest difference in ulps of the
//      dtype are printed, not checked (where 1 + erf or 1 + tanh cancels, g below about -4,
//      one fp32 ulp of erf moves a small h by several ulps of the dtype).
//   2. h against float64 (act(g) * u of the float64 products, nothing rounded) within 1.5e-2
//      relative error per tile, and gu likewise within 1e-2: a wrong interleave fails here even
//      where both paths agree.
//   3. every row of a used tile written (padding rows: act(0) * 0 = 0), a used tile whose
//      expert is out of range written with zeros (hopper_padded_scheduler.cuh: its L is E, past
//      B's last expert, which TMA reads as zeros), the tile past the used count and a guard tile
//      past the buffer left as they were (a sentinel fill), for h and for gu; and the entry's
//      refusals (n not a multiple of 16, an unknown activation).
// Then times the gate/up GEMM of E=128 H=2048 I=768 (N = 2I = 1536, K = 2048) at 128 and 512
// rows per expert in bf16, both configurations: the plain GEMM (gu [R, 2I], no swiglu pass:
// that one is separate) and the fused one (h [R, I]) for each activation; median of 20 launches
// timed with cudaEvents after 3 untimed.
//
// Built here (nvcc 13.0; the act units and this file with --fmad=false, as
// build_tools/hopper_build.py UNIT_FLAGS and setup.py compile the act units and swiglu):
//
//   C=/tmp/argon_cutlass/cutlass_library/source  # or $ARGON_CUTLASS_DIR (CUTLASS 4.2.0.0)
//   S=torch_argon/csrc/hopper; O=/tmp/actsa_obj; mkdir -p $O build
//   F="-std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//      -I$C/include -I$C/tools/util/include -Itorch_argon/csrc"
//   nvcc $F -c $S/hopper_padded_entry.cu -o $O/hopper_padded_entry.o
//   for u in {bf16,fp16}_{pingpong_128x128,cooperative_128x256}; do
//     nvcc $F --fmad=false -c $S/hopper_padded_act_$u.cu -o $O/hopper_padded_act_$u.o  # ~40 s
//     nvcc $F -c $S/hopper_padded_$u.cu -o $O/hopper_padded_$u.o
//   done
//   nvcc $F --fmad=false -Xcompiler -ffp-contract=off -c tools/hopper_padded_act_standalone.cu \
//     -o $O/padded_act_standalone.o
//   nvcc -gencode=arch=compute_90a,code=sm_90a $O/padded_act_standalone.o \
//     $O/hopper_padded_entry.o $O/hopper_padded_act_*.o $O/hopper_padded_{bf16,fp16}_*.o \
//     -o build/padded_act_standalone  # ~2 MB; cudart static; needs glibc >= 2.34 and
//                                     # GLIBCXX_3.4.11 (a static libstdc++ would need 2.36)
//   ./build/padded_act_standalone  # the checks' lines, then the timings; exit 1 on a failed
//                                  # check, 2 on a CUDA error (no GPU: the first call's)
// Carried to the device as `carry: ["build/padded_act_standalone"]` and run by
// `bash bench/h200_session.sh standalone`.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_math.cuh"
#include "hopper/hopper_gemm.h"
#include "hopper/hopper_padded_gemm.h"
#include "shared/activation.h"
#include "shared/swiglu_params.h"
#include "standalone_cuda.h"

namespace {

using standalone::median_us;
using standalone::sm_count;
using standalone::to_device;
using standalone::to_host;

const char* const kConfigs[ARGON_HOPPER_PADDED_N_CONFIGS] = {"pingpong_128x128",
                                                             "cooperative_128x256"};
const char* act_name(int act) {
  return act == ARGON_ACT_GELU ? "gelu" : act == ARGON_ACT_GELU_TANH ? "gelu_tanh" : "silu";
}
const char* dtype_name(int dtype) { return dtype == ARGON_HOPPER_BF16 ? "bf16" : "fp16"; }

// The dtype's bits and values, on the host (CUDA's own conversions: round to nearest even).
float to_float(uint16_t b, int dtype) {
  if (dtype == ARGON_HOPPER_BF16) {
    __nv_bfloat16_raw r;
    r.x = b;
    return __bfloat162float(__nv_bfloat16(r));
  }
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}
uint16_t to_bits(float v, int dtype) {
  if (dtype == ARGON_HOPPER_BF16) return __nv_bfloat16_raw(__float2bfloat16_rn(v)).x;
  return __half_raw(__float2half_rn(v)).x;
}
// Distance in ulps of the dtype between two finite values (sign and magnitude to a line).
int ulps(uint16_t x, uint16_t y) {
  const int a = (x & 0x8000) ? -int(x & 0x7FFF) : int(x & 0x7FFF);
  const int b = (y & 0x8000) ? -int(y & 0x7FFF) : int(y & 0x7FFF);
  return std::abs(a - b);
}

// The activations in float64 (the reference; activation.h's formulas).
double act64(double g, int act) {
  if (act == ARGON_ACT_GELU) return g * 0.5 * (1.0 + std::erf(g / std::sqrt(2.0)));
  if (act == ARGON_ACT_GELU_TANH)
    return g * 0.5 * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
  return g / (1.0 + std::exp(-g));
}

// The unfused path's swiglu on the GPU over gu [rows, 2I] (gate columns [0, I), up [I, 2I)):
// what csrc/cuda/swiglu_cuda.cu's kernel computes per element (the activation a template
// parameter, gate and up widened from the dtype, argon_gated<CudaMath>, one round to nearest
// even), one element per thread.
template <class T>
__device__ float widen(T x);
template <>
__device__ float widen(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ float widen(__half x) {
  return __half2float(x);
}
template <class T>
__device__ T narrow(float x);
template <>
__device__ __nv_bfloat16 narrow(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __half narrow(float x) {
  return __float2half_rn(x);
}

template <class T, int Act>
__global__ void swiglu_kernel(const T* __restrict__ gu, T* __restrict__ h, int64_t rows, int n_h) {
  const int64_t total = rows * n_h;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n_h, c = i % n_h;
    const float g = widen(gu[r * 2 * n_h + c]), u = widen(gu[r * 2 * n_h + n_h + c]);
    h[i] = narrow<T>(argon_gated<argon::cuda::CudaMath>(g, u, Act));
  }
}

template <class T>
void swiglu_gpu_t(const void* gu, void* h, int64_t rows, int n_h, int act) {
  const T* g = static_cast<const T*>(gu);
  T* o = static_cast<T*>(h);
  const int blocks = int(std::min<int64_t>((rows * n_h + 255) / 256, 4096));
  if (act == ARGON_ACT_GELU)
    swiglu_kernel<T, ARGON_ACT_GELU><<<blocks, 256>>>(g, o, rows, n_h);
  else if (act == ARGON_ACT_GELU_TANH)
    swiglu_kernel<T, ARGON_ACT_GELU_TANH><<<blocks, 256>>>(g, o, rows, n_h);
  else
    swiglu_kernel<T, ARGON_ACT_SILU><<<blocks, 256>>>(g, o, rows, n_h);
  CHECK_CUDA(cudaGetLastError());
}

void swiglu_gpu(int dtype, const void* gu, void* h, int64_t rows, int n_h, int act) {
  if (dtype == ARGON_HOPPER_BF16)
    swiglu_gpu_t<__nv_bfloat16>(gu, h, rows, n_h, act);
  else
    swiglu_gpu_t<__half>(gu, h, rows, n_h, act);
}

// Values of [-scale, scale) from a hash of the index, in the dtype (the timing's operands).
__global__ void fill_kernel(uint16_t* p, int64_t n, float scale, uint32_t seed, int dtype) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 0x9E3779B9u ^ seed ^ uint32_t(i >> 32) * 0x85EBCA6Bu;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    const float v = (float(x >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    p[i] = dtype == ARGON_HOPPER_BF16 ? __nv_bfloat16_raw(__float2bfloat16_rn(v)).x
                                      : __half_raw(__float2half_rn(v)).x;
  }
}

// One launch of either entry (act < 0: the plain GEMM); 0, or 1 with its message printed.
int launch(int dtype, int config, const void* a, const void* b, void* d, const int32_t* te,
           const int32_t* used, int tiles, int e, int n, int k, int act, bool quiet = false) {
  ArgonHopperPaddedGemm g{};
  g.dtype = dtype;
  g.config = config;
  g.a = a;
  g.b = b;
  g.d = d;
  g.tile_expert = te;
  g.used_tiles = used;
  g.max_tiles_m = tiles;
  g.n_experts = e;
  g.n = n;
  g.k = k;
  g.sm_count = sm_count();
  g.stream = nullptr;
  g.activation = act < 0 ? ARGON_ACT_SILU : act;
  char err[512] = "";
  const int rc = act < 0 ? argon_hopper_padded_gemm(&g, err, sizeof err)
                         : argon_hopper_padded_act_gemm(&g, err, sizeof err);
  if (rc && !quiet) std::printf("  launch failed: %s\n", err);
  return rc;
}

// The checks of one dtype (both configurations, every activation): above.
bool check(int dtype, std::mt19937& rng) {
  const int E = 5, I = 200, N = 2 * I, K = 264, tiles = 6, used = 5, T = ARGON_HOPPER_PADDED_TILE_M;
  const std::vector<int32_t> tile_expert = {2, 0, 7, 4, -1, 1};
  const int rows = tiles * T, guard = T;  // h and gu get one more tile: nothing may reach it
  const int pad_from = T + 78, pad_to = 2 * T;  // tile 1's padding rows: zeros
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  std::vector<uint16_t> a(size_t(rows) * K), w(size_t(E) * N * K), wi(w.size());
  for (int r = 0; r < rows; ++r)
    for (int kk = 0; kk < K; ++kk)
      a[size_t(r) * K + kk] = r >= pad_from && r < pad_to ? 0 : to_bits(2.f * val(rng), dtype);
  const float ws = 2.f / std::sqrt(float(K));
  for (auto& v : w) v = to_bits(ws * val(rng), dtype);
  // interleave_gate_up: row 16 j + c = gate row 8 j + c, row 16 j + 8 + c = up row 8 j + c
  for (int e = 0; e < E; ++e)
    for (int j = 0; j < I / 8; ++j)
      for (int c = 0; c < 8; ++c)
        for (int half = 0; half < 2; ++half)
          std::memcpy(&wi[(size_t(e) * N + 16 * j + 8 * half + c) * K],
                      &w[(size_t(e) * N + half * I + 8 * j + c) * K], size_t(K) * 2);
  // float64 gu of the used tiles with an expert
  std::vector<double> gu64(size_t(rows) * N, 0.0);
  for (int t = 0; t < used; ++t) {
    const int e = tile_expert[t];
    if (e < 0 || e >= E) continue;
    for (int r = t * T; r < (t + 1) * T; ++r)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int kk = 0; kk < K; ++kk)
          s += double(to_float(a[size_t(r) * K + kk], dtype)) *
               to_float(w[(size_t(e) * N + j) * K + kk], dtype);
        gu64[size_t(r) * N + j] = s;
      }
  }
  const uint16_t sentinel = 0x7B7B;  // finite in both dtypes (fp16 61280, bf16 1.3e36)
  const std::vector<uint16_t> gu_init(size_t(rows + guard) * N, sentinel);
  const std::vector<uint16_t> h_init(size_t(rows + guard) * I, sentinel);
  uint16_t* d_a = to_device(a);
  uint16_t* d_w = to_device(w);
  uint16_t* d_wi = to_device(wi);
  uint16_t* d_gu = to_device(gu_init);
  uint16_t* d_h = to_device(h_init);
  uint16_t* d_hu = to_device(h_init);  // the unfused h (GPU swiglu)
  int32_t* d_te = to_device(tile_expert);
  int32_t* d_used = to_device(std::vector<int32_t>{used});
  bool all = true;

  for (int config = 0; config < ARGON_HOPPER_PADDED_N_CONFIGS; ++config) {
    // the unfused path's GEMM, and gu's own checks
    CHECK_CUDA(cudaMemcpy(d_gu, gu_init.data(), gu_init.size() * 2, cudaMemcpyHostToDevice));
    bool ok = launch(dtype, config, d_a, d_w, d_gu, d_te, d_used, tiles, E, N, K, -1) == 0;
    CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> gu = to_host(d_gu, gu_init.size());
    double gu_worst = 0;
    for (int t = 0; t <= tiles && ok; ++t) {  // t = tiles: the guard tile
      const int e = t < tiles ? tile_expert[t] : -1;
      const bool valid = t < used && e >= 0 && e < E;
      double err2 = 0, ref2 = 0;
      bool untouched = true, zero = true;
      for (int r = t * T; r < (t + 1) * T; ++r)
        for (int j = 0; j < N; ++j) {
          const uint16_t got = gu[size_t(r) * N + j];
          untouched &= got == sentinel;
          zero &= (got & 0x7FFF) == 0;
          if (valid) {
            const double d = to_float(got, dtype) - gu64[size_t(r) * N + j];
            err2 += d * d;
            ref2 += gu64[size_t(r) * N + j] * gu64[size_t(r) * N + j];
          }
        }
      if (t >= used) {
        if (!untouched) std::printf("  gu: tile %d (past the used count%s) was written\n", t,
                                    t == tiles ? ", past the buffer" : "");
        ok &= untouched;
      } else if (!valid) {
        if (!zero) std::printf("  gu: tile %d (expert %d out of range) is not zeros\n", t, e);
        ok &= zero;
      } else {
        const double rel = std::sqrt(err2 / (ref2 + 1e-30));
        gu_worst = std::max(gu_worst, rel);
        if (rel > 1e-2) {
          std::printf("  gu: tile %d (expert %d): relative error %.3g\n", t, e, rel);
          ok = false;
        }
      }
    }
    std::printf("check: %s %s plain GEMM gu [%d, %d]: %s (worst tile's relative error %.2e)\n",
                dtype_name(dtype), kConfigs[config], rows, N, ok ? "ok" : "FAILED", gu_worst);
    all &= ok;
    if (!ok) continue;

    for (int act : {ARGON_ACT_SILU, ARGON_ACT_GELU, ARGON_ACT_GELU_TANH}) {
      CHECK_CUDA(cudaMemcpy(d_h, h_init.data(), h_init.size() * 2, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(d_hu, h_init.data(), h_init.size() * 2, cudaMemcpyHostToDevice));
      bool ok_act = launch(dtype, config, d_a, d_wi, d_h, d_te, d_used, tiles, E, N, K, act) == 0;
      swiglu_gpu(dtype, d_gu, d_hu, int64_t(used) * T, I, act);
      CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> h = to_host(d_h, h_init.size());
      const std::vector<uint16_t> hu = to_host(d_hu, h_init.size());
      int64_t differ_gpu = 0, differ_host = 0, first_gpu = -1;
      int ulp_gpu = 0, ulp_host = 0;
      double worst = 0;
      for (int t = 0; t <= tiles && ok_act; ++t) {
        const int e = t < tiles ? tile_expert[t] : -1;
        const bool valid = t < used && e >= 0 && e < E;
        double err2 = 0, ref2 = 0;
        bool untouched = true, zero = true, pad_zero = true;
        for (int r = t * T; r < (t + 1) * T; ++r)
          for (int c = 0; c < I; ++c) {
            const size_t at = size_t(r) * I + c;
            const uint16_t got = h[at];
            untouched &= got == sentinel;
            zero &= (got & 0x7FFF) == 0;
            if (t >= used) continue;
            if (r >= pad_from && r < pad_to) pad_zero &= (got & 0x7FFF) == 0;
            // 1a: the unfused path on the GPU, bit for bit
            if (got != hu[at]) {
              if (first_gpu < 0) first_gpu = int64_t(at);
              ++differ_gpu;
              ulp_gpu = std::max(ulp_gpu, ulps(got, hu[at]));
            }
            // 1b: the GPU's gu, swiglu on the host (activation.h with the host's libm)
            const float g = to_float(gu[size_t(r) * N + c], dtype);
            const float u = to_float(gu[size_t(r) * N + I + c], dtype);
            const uint16_t host =
                to_bits(argon_gated<argon::cuda::CudaMath>(g, u, uint32_t(act)), dtype);
            if (got != host) {
              ++differ_host;
              ulp_host = std::max(ulp_host, ulps(got, host));
            }
            // 2: float64
            if (valid) {
              const double g64 = gu64[size_t(r) * N + c], u64 = gu64[size_t(r) * N + I + c];
              const double ref = act64(g64, act) * u64, d = to_float(got, dtype) - ref;
              err2 += d * d;
              ref2 += ref * ref;
            }
          }
        if (t >= used) {
          if (!untouched) std::printf("  h: tile %d (past the used count%s) was written\n", t,
                                      t == tiles ? ", past the buffer" : "");
          ok_act &= untouched;
          continue;
        }
        if (!valid && !zero) {
          std::printf("  h: tile %d (expert %d out of range) is not zeros\n", t, e);
          ok_act = false;
        }
        if (!pad_zero) {
          std::printf("  h: tile %d's padding rows (zeros in) are not zeros\n", t);
          ok_act = false;
        }
        if (valid) {
          const double rel = std::sqrt(err2 / (ref2 + 1e-30));
          worst = std::max(worst, rel);
          if (rel > 1.5e-2) {
            std::printf("  h: tile %d (expert %d): relative error %.3g against float64\n", t, e,
                        rel);
            ok_act = false;
          }
        }
      }
      if (differ_gpu) {
        std::printf("  h: %lld of %lld values differ from the plain GEMM + swiglu on the GPU, by "
                    "up to %d ulp (first at row %lld column %lld: %04x against %04x)\n",
                    (long long)differ_gpu, (long long)used * T * I, ulp_gpu,
                    (long long)(first_gpu / I), (long long)(first_gpu % I), h[first_gpu],
                    hu[first_gpu]);
        ok_act = false;
      }
      std::printf("check: %s %s %s: %s (against the plain GEMM + swiglu on the GPU: %lld "
                  "differ; + swiglu on the host's libm, not checked: %lld differ, max %d ulp; "
                  "float64: worst tile %.2e)\n",
                  dtype_name(dtype), kConfigs[config], act_name(act), ok_act ? "ok" : "FAILED",
                  (long long)differ_gpu, (long long)differ_host, ulp_host, worst);
      all &= ok_act;
    }
  }

  // The entry's refusals: n not a multiple of 16 (I = 12), an unknown activation.
  const bool refuses_n = launch(dtype, 0, d_a, d_wi, d_h, d_te, d_used, tiles, E, 24, K,
                                ARGON_ACT_SILU, true) == 1;
  const bool refuses_act = launch(dtype, 0, d_a, d_wi, d_h, d_te, d_used, tiles, E, N, K, 3,
                                  true) == 1;
  std::printf("check: %s refusals (n = 24, activation 3): %s\n", dtype_name(dtype),
              refuses_n && refuses_act ? "ok" : "FAILED");
  all &= refuses_n && refuses_act;
  CHECK_CUDA(cudaDeviceSynchronize());
  standalone::free_all({d_a, d_w, d_wi, d_gu, d_h, d_hu, d_te, d_used});
  return all;
}

// The gate/up GEMM of E=128 H=2048 I=768 with `per_expert` rows in every expert (whole tiles),
// bf16, both configurations: plain (gu) and fused (h, each activation). The weights are one
// hashed stack used as both the original and the interleaved one (a permutation of the same
// values: the time does not tell them apart).
bool time_gate_up(int per_expert) {
  const int E = 128, I = 768, N = 2 * I, K = 2048, dtype = ARGON_HOPPER_BF16;
  const int per = per_expert / ARGON_HOPPER_PADDED_TILE_M, tiles = E * per;
  const int64_t rows = int64_t(tiles) * ARGON_HOPPER_PADDED_TILE_M;
  std::vector<int32_t> tile_expert(tiles);
  for (int t = 0; t < tiles; ++t) tile_expert[t] = t / per;
  uint16_t *d_a = nullptr, *d_w = nullptr, *d_gu = nullptr, *d_h = nullptr;
  CHECK_CUDA(cudaMalloc(&d_a, size_t(rows) * K * 2));
  CHECK_CUDA(cudaMalloc(&d_w, size_t(E) * N * K * 2));
  CHECK_CUDA(cudaMalloc(&d_gu, size_t(rows) * N * 2));
  CHECK_CUDA(cudaMalloc(&d_h, size_t(rows) * I * 2));
  fill_kernel<<<4096, 256>>>(d_a, rows * K, 1.0f, 1u, dtype);
  fill_kernel<<<4096, 256>>>(d_w, int64_t(E) * N * K, 2.0f / std::sqrt(float(K)), 2u, dtype);
  CHECK_CUDA(cudaGetLastError());
  int32_t* d_te = to_device(tile_expert);
  int32_t* d_used = to_device(std::vector<int32_t>{tiles});
  CHECK_CUDA(cudaDeviceSynchronize());
  const double flop = 2.0 * double(rows) * N * K;
  bool ok = true;
  for (int config = 0; config < ARGON_HOPPER_PADDED_N_CONFIGS; ++config) {
    const double plain = median_us([&] {
      return launch(dtype, config, d_a, d_w, d_gu, d_te, d_used, tiles, E, N, K, -1);
    });
    std::printf("time: gate/up E=%d N=%d K=%d bf16, %d rows per expert, %s: plain GEMM "
                "(gu [%lld, %d]) %.1f us (%.0f TFLOP/s)\n",
                E, N, K, per_expert, kConfigs[config], (long long)rows, N, plain,
                flop / plain * 1e-6);
    ok &= plain > 0;
    for (int act : {ARGON_ACT_SILU, ARGON_ACT_GELU, ARGON_ACT_GELU_TANH}) {
      const double fused = median_us([&] {
        return launch(dtype, config, d_a, d_w, d_h, d_te, d_used, tiles, E, N, K, act);
      });
      std::printf("time: gate/up E=%d N=%d K=%d bf16, %d rows per expert, %s: fused %s "
                  "(h [%lld, %d]) %.1f us (%.0f TFLOP/s), %.3f of the plain GEMM's time\n",
                  E, N, K, per_expert, kConfigs[config], act_name(act), (long long)rows, I,
                  fused, flop / fused * 1e-6, fused / plain);
      ok &= fused > 0;
    }
  }
  standalone::free_all({d_a, d_w, d_gu, d_h, d_te, d_used});
  return ok;
}

}  // namespace

int main() {
  standalone::print_device();
  std::mt19937 rng(1);
  bool ok = true;
  for (int dtype : {ARGON_HOPPER_BF16, ARGON_HOPPER_FP16}) ok &= check(dtype, rng);
  for (int per_expert : {128, 512}) ok &= time_gate_up(per_expert);
  std::printf(ok ? "all checks ok\n" : "CHECKS FAILED\n");
  return ok ? 0 : 1;
}
