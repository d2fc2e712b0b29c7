// The warp-level and bit-level primitives of the gpuq kernels, written twice: as CUDA (inline
// PTX: mma.sync, prmt, fma.rn.bf16x2) for sm_80+, and as plain C++ for the host emulation
// (gpuq_host_runtime.h runs each lane as a fiber; an mma is a warp exchange of the fragments,
// after which every lane computes its own part of D from all 32 lanes' A, B and C, exactly as the
// PTX ISA lays the fragments out). The kernels (gpuq_kernel.h) call only these, so the same
// kernel source runs on an H200 and in CI without a GPU.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k*"; g = lane / 4, t = lane % 4):
//   m16n8k16 bf16/f16: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
//                      a[3] = A[g+8][2t+8..]; b[0] = B[2t..2t+1][g], b[1] = B[2t+8..][g]
//   m16n8k32 s8:       a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..], a[2] = A[g][16+4t..],
//                      a[3] = A[g+8][16+4t..]; b[0] = B[4t..4t+3][g], b[1] = B[16+4t..][g]
//   m16n8k16 s8:       a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..]; b = B[4t..4t+3][g]
//   D (all):           d[0] = D[g][2t], d[1] = D[g][2t+1], d[2] = D[g+8][2t], d[3] = D[g+8][2t+1]
// (lower k or lower column in the lower half of a 32-bit register, the lower byte of a word).
#pragma once
#include <cstdint>
#include <cstring>

#include "gpuq/gpuq_target.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define GQ_DEV __device__ __forceinline__
// Shared memory of a thread block; in the emulation, the thread's (its blocks run one at a time).
#define GQ_SHARED __shared__
#else
#define GQ_SHARED static thread_local
#include <cmath>
#include <stdexcept>
#include <string>

#include "gpuq_host_runtime.h"
#define GQ_DEV inline
#endif

namespace gpuq {
inline namespace GPUQ_TARGET {

// ---- scalars --------------------------------------------------------------------------------

GQ_DEV float as_float(uint32_t u) {
#if defined(__CUDACC__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

GQ_DEV uint32_t as_bits(float f) {
#if defined(__CUDACC__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// float(u) for 0 <= u < 2^23 without an int-to-float conversion (a quarter-rate instruction on
// NVIDIA GPUs): the bits 0x4B000000 | u are 2^23 + u exactly.
GQ_DEV float small_uint_to_float(uint32_t u) { return as_float(0x4B000000u | u) - 8388608.0f; }

// IEEE fp16 bits to float, exactly (inf and NaN keep their payload).
GQ_DEV float half_bits_to_float(uint32_t h) {
#if defined(__CUDACC__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
#else
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31, man = h & 0x3FF;
  if (exp == 31) return as_float(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    const float v = static_cast<float>(man) * 5.9604644775390625e-08f;  // man * 2^-24, exact
    return sign ? -v : v;
  }
  return as_float(sign | ((exp + 112) << 23) | (man << 13));
#endif
}

// a * b - c with two roundings, never fused into one (the reference's order for the formats
// with mins: docs/quantized-formats.md), whatever the compiler's contraction flags.
GQ_DEV float mul_sub_rn(float a, float b, float c) {
#if defined(__CUDACC__)
  return __fsub_rn(__fmul_rn(a, b), c);
#else
  volatile float product = a * b;  // a store the compiler may not fuse with the subtraction
  return product - c;
#endif
}

// Correctly rounded float division (the q8 definition's rounding; --use_fast_math safe).
GQ_DEV float div_rn(float a, float b) {
#if defined(__CUDACC__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Round to the nearest integer, ties to even (the q8 definition's rint).
GQ_DEV int round_half_even(float x) {
#if defined(__CUDACC__)
  return __float2int_rn(x);
#else
  return static_cast<int>(std::nearbyint(x));  // the default rounding mode: to nearest even
#endif
}

// __byte_perm: byte n of the result is byte ((sel >> 4n) & 7) of the 8 bytes {b:a}.
GQ_DEV uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDACC__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t both = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const int byte = (sel >> (4 * n)) & 7;
    r |= static_cast<uint32_t>((both >> (8 * byte)) & 0xFF) << (8 * n);
  }
  return r;
#endif
}

// ---- 16-bit floats ----------------------------------------------------------------------------

// Float to bf16 / fp16 bits, round to nearest even (NaN stays NaN).
GQ_DEV uint16_t float_to_bf16_bits(float f) {
#if defined(__CUDACC__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  const uint32_t u = as_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
#endif
}

GQ_DEV uint16_t float_to_half_bits(float f) {
#if defined(__CUDACC__)
  return __half_as_ushort(__float2half_rn(f));
#else
  const uint32_t u = as_bits(f), sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00);
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to inf
  if (a < 0x38800000u) {  // fp16 subnormal or zero: a multiple of 2^-24, rounded to even
    const float v = as_float(a) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(v)));
  }
  const uint32_t r = a + 0xFFF + ((a >> 13) & 1);
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
#endif
}

GQ_DEV float bf16_bits_to_float(uint32_t h) { return as_float(h << 16); }

// Two bf16 values a + c (round to nearest even); exact where the kernels use it (small
// integers). fma with 1.0: the sm_80 form (add.bf16x2 is sm_90 only).
GQ_DEV uint32_t bf16x2_add(uint32_t a, uint32_t c) {
#if defined(__CUDACC__)
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3F803F80u), "r"(c));
  return d;
#else
  const float lo = bf16_bits_to_float(a & 0xFFFF) + bf16_bits_to_float(c & 0xFFFF);
  const float hi = bf16_bits_to_float(a >> 16) + bf16_bits_to_float(c >> 16);
  return float_to_bf16_bits(lo) | (static_cast<uint32_t>(float_to_bf16_bits(hi)) << 16);
#endif
}

// a * b + c on two bf16 values, rounded once.
GQ_DEV uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDACC__)
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const double v = static_cast<double>(bf16_bits_to_float((a >> (16 * h)) & 0xFFFF)) *
                         bf16_bits_to_float((b >> (16 * h)) & 0xFFFF) +
                     bf16_bits_to_float((c >> (16 * h)) & 0xFFFF);
    r |= static_cast<uint32_t>(float_to_bf16_bits(static_cast<float>(v))) << (16 * h);
  }
  return r;
#endif
}

// Two floats as bf16x2 (lo in the low half), each rounded to nearest even.
GQ_DEV uint32_t pack_bf16x2(float lo, float hi) {
  return float_to_bf16_bits(lo) | (static_cast<uint32_t>(float_to_bf16_bits(hi)) << 16);
}

// A hint: bring the 128-byte line at p into L1 (a no-op in the host emulation).
GQ_DEV void prefetch_l1(const uint8_t* p) {
#if defined(__CUDACC__)
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

// ---- matrix products --------------------------------------------------------------------------

#if !defined(__CUDACC__)
namespace host_mma {
// Each lane's fragments, gathered from the warp (a lane-synchronous exchange).
struct Frags {
  uint32_t a[4], b[2];
};

inline void gather(const uint32_t* a, int na, const uint32_t* b, int nb, Frags* all) {
  Frags mine{};
  for (int i = 0; i < na; ++i) mine.a[i] = a[i];
  for (int i = 0; i < nb; ++i) mine.b[i] = b[i];
  host::warp_exchange(&mine, sizeof(Frags), all);
}

inline float half_of(uint32_t reg, int hi, bool bf16) {
  const uint32_t h = hi ? reg >> 16 : reg & 0xFFFF;
  return bf16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
}

inline int8_t byte_of(uint32_t reg, int i) { return static_cast<int8_t>((reg >> (8 * i)) & 0xFF); }

// D = A (16 x 16) B (16 x 8) + C in float: products exact, summed in double, rounded once.
inline void mma_16bit(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                      bool bf16) {
  Frags all[32];
  gather(a, 4, b, 2, all);
  const int lane = host::lane_id(), g = lane / 4, t = lane % 4;
  for (int j = 0; j < 4; ++j) {
    const int row = g + 8 * (j / 2), col = 2 * t + (j % 2);
    double s = 0;
    for (int k = 0; k < 16; ++k) {
      // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register (row / 8) + 2 * (k / 8)
      const Frags& fa = all[(row % 8) * 4 + (k % 8) / 2];
      const float av = half_of(fa.a[(row / 8) + 2 * (k / 8)], k % 2, bf16);
      // B[k][col]: lane col * 4 + (k % 8) / 2, register k / 8
      const Frags& fb = all[col * 4 + (k % 8) / 2];
      const float bv = half_of(fb.b[k / 8], k % 2, bf16);
      s += static_cast<double>(av) * bv;
    }
    d[j] = static_cast<float>(s + c[j]);
  }
}

// D = A (16 x K) B (K x 8) + C in int32, K = 32 (k32) or 16.
inline void mma_s8(int32_t d[4], const uint32_t* a, const uint32_t* b, const int32_t c[4],
                   bool k32) {
  Frags all[32];
  gather(a, k32 ? 4 : 2, b, k32 ? 2 : 1, all);
  const int lane = host::lane_id(), g = lane / 4, t = lane % 4;
  for (int j = 0; j < 4; ++j) {
    const int row = g + 8 * (j / 2), col = 2 * t + (j % 2);
    int64_t s = 0;
    for (int k = 0; k < (k32 ? 32 : 16); ++k) {
      const int kk = k % 16, reg_hi = k / 16;  // k32: second half in a[2], a[3] and b[1]
      const Frags& fa = all[(row % 8) * 4 + kk / 4];
      const int8_t av = byte_of(fa.a[(row / 8) + 2 * reg_hi], kk % 4);
      const Frags& fb = all[col * 4 + kk / 4];
      const int8_t bv = byte_of(fb.b[reg_hi], kk % 4);
      s += static_cast<int64_t>(av) * bv;
    }
    d[j] = static_cast<int32_t>(static_cast<uint32_t>(c[j]) + static_cast<uint32_t>(s));
  }
}
}  // namespace host_mma
#endif

// D = A B + C, bf16 operands, fp32 accumulators (m16n8k16).
GQ_DEV void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  host_mma::mma_16bit(d, a, b, c, true);
#endif
}

// D = A B + C, fp16 operands, fp32 accumulators (m16n8k16).
GQ_DEV void mma_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  host_mma::mma_16bit(d, a, b, c, false);
#endif
}

// D = A B + C, int8 operands, int32 accumulators: m16n8k32 (a[4], b[2]).
GQ_DEV void mma_s8_k32(int32_t d[4], const uint32_t a[4], const uint32_t b[2], const int32_t c[4]) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
        "r"(c[2]), "r"(c[3]));
#else
  host_mma::mma_s8(d, a, b, c, true);
#endif
}

// D = A B + C, int8 operands, int32 accumulators: m16n8k16 (a[2], b[1]).
GQ_DEV void mma_s8_k16(int32_t d[4], const uint32_t a[2], const uint32_t b[1], const int32_t c[4]) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%8,%9,%10};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
#else
  host_mma::mma_s8(d, a, b, c, false);
#endif
}

// ---- the lane's position ----------------------------------------------------------------------

// thread_in_block: the thread's index in its block; block_sync: every thread of the block
// arrives before any goes on (__syncthreads).
#if defined(__CUDACC__)
GQ_DEV int lane_id() { return threadIdx.x & 31; }
GQ_DEV int warp_id() { return threadIdx.x >> 5; }
GQ_DEV int thread_in_block() { return threadIdx.x; }
GQ_DEV int block_x() { return blockIdx.x; }
GQ_DEV int block_y() { return blockIdx.y; }
GQ_DEV void block_sync() { __syncthreads(); }
#else
GQ_DEV int lane_id() { return host::lane_id(); }
GQ_DEV int warp_id() { return host::warp_id(); }
GQ_DEV int thread_in_block() { return host::thread_id(); }
GQ_DEV int block_x() { return host::block_x(); }
GQ_DEV int block_y() { return host::block_y(); }
GQ_DEV void block_sync() { host::block_barrier(); }
#endif

// ---- loads of GGUF bytes ----------------------------------------------------------------------
// Blocks are 2-, 4-, 8- or 16-byte aligned (or not at all: MXFP4's 17 bytes), so each format
// loads its words through the widest access its alignment allows.

// `p` itself; in the emulation, a lane's error where a GPU would fault: an address that is not
// a multiple of the load's width (so the CPU tests catch a misaligned wide load).
template <int WIDTH>
GQ_DEV const uint8_t* checked(const uint8_t* p) {
#if !defined(__CUDACC__)
  if (reinterpret_cast<uintptr_t>(p) % WIDTH) {
    throw std::runtime_error("gpuq host: misaligned " + std::to_string(WIDTH) + "-byte load");
  }
#endif
  return p;
}

GQ_DEV uint32_t load_u8(const uint8_t* p) { return *p; }
GQ_DEV uint32_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(checked<2>(p));
}
GQ_DEV uint32_t load_u32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(checked<4>(p));
}
// 8 bytes from an 8-byte aligned address, as two words (one 64-bit load).
GQ_DEV void load_2u32(const uint8_t* p, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDACC__)
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  lo = v.x;
  hi = v.y;
#else
  std::memcpy(&lo, checked<8>(p), 4);
  std::memcpy(&hi, p + 4, 4);
#endif
}
// 4 bytes from a 2-byte aligned address.
GQ_DEV uint32_t load_u32_a2(const uint8_t* p) { return load_u16(p) | (load_u16(p + 2) << 16); }
// 4 bytes from any address.
GQ_DEV uint32_t load_u32_a1(const uint8_t* p) {
  return load_u8(p) | (load_u8(p + 1) << 8) | (load_u8(p + 2) << 16) | (load_u8(p + 3) << 24);
}

}  // namespace GPUQ_TARGET
}  // namespace gpuq
