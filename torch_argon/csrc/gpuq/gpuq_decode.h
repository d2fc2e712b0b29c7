// The gpuq decode: GGUF blocks to bf16 / fp16 weights, for the layer's dequant path
// (torch_argon/experts/cuda_quantized_dequant.py: the experts decoded once per layer call, then
// the bf16 grouped GEMMs).
//
//     out[e, n, k] = dequantize_reference(w)[e, n, k], rounded once to out's type
//
// bit for bit: each value is the format's W = s * (code - OFF) - m (gpuq_formats.h) with the
// reference's float32 operations (s and m as the reference computes them; the product and the
// subtraction of the formats with mins rounded apart, never fused), then one round to nearest
// even.
//
// Algorithm. One thread per 32-value chunk of a row: it reads the chunk's codes, scales and mins
// through the format's `chunk` for each of the four column groups t (the same bytes the GEMM
// reads), turns each code into its exact float with a byte permute and a subtraction (no
// int-to-float conversion), scales it (two float operations with a min, one without), rounds
// pairs with one packing conversion, and writes the 32 values as 64 contiguous bytes: four
// 16-byte stores where out and its strides are 16-byte aligned, else 32 2-byte stores.
//
// Launch shape: kDecodeThreads threads per block, one thread per chunk, chunks in row-major
// order (a warp writes 2 KB of one row), a 1-D grid of ceil(chunks / kDecodeThreads) blocks.
// Limits: n_in a multiple of the format's block; E * N * n_in / 32 chunks below 2^32.
#pragma once
#include "gpuq_formats.h"
#include "gpuq_params.h"

namespace gpuq {
inline namespace GPUQ_TARGET {

constexpr int kDecodeThreads = 256;

// The bits of two values as bf16 (else fp16), each rounded to nearest even, lo in the low half:
// one packing conversion on the GPU.
template <bool BF16>
GQ_DEV uint32_t pack_pair(float lo, float hi) {
#if defined(__CUDACC__)
  if (BF16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  const auto bits = BF16 ? float_to_bf16_bits : float_to_half_bits;
  return bits(lo) | (static_cast<uint32_t>(bits(hi)) << 16);
#endif
}

// 16 bytes at dst (16-byte aligned) from four words.
GQ_DEV void store_16_bytes(void* dst, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
#if defined(__CUDACC__)
  *static_cast<uint4*>(dst) = make_uint4(w0, w1, w2, w3);
#else
  const uint32_t words[4] = {w0, w1, w2, w3};
  std::memcpy(dst, words, sizeof words);
#endif
}

// float(code - OFF) of byte b of `codes` (F's 4 codes in a word), exactly, in two instructions:
// one byte permute makes the bits 0x4B0000uu, the float 2^23 + u, and one subtraction takes
// 2^23 and the code's bias off (signed codes: u = v + 128, their sign bit flipped first).
template <class F>
GQ_DEV float code_value(uint32_t codes, int b) {
  constexpr float kBias = 8388608.0f + (F::CODE == U7 ? F::OFF : 128);
  const uint32_t u = F::CODE == U7 ? codes : codes ^ 0x80808080u;
  return as_float(byte_perm(u, 0x4B000000u, 0x7540u | b)) - kBias;
}

// The 8 values of a lane's codes (F::chunk's two words: values 4t .. 4t + 3 and 16 + 4t .. + 3
// of a chunk) with their groups' scales and mins, as bf16 (else fp16) pairs: pairs[2 word + i]
// holds values 4i (low half) and 4i + 1 of the word's four (the decode and the tile-decode
// GEMM, gpuq_tiled_kernel.h, round the same values the same way).
template <class F, bool BF16>
GQ_DEV void scaled_pairs(const uint32_t codes[2], const float* s, const float* m,
                         uint32_t pairs[4]) {
  GQ_UNROLL
  for (int word = 0; word < 2; ++word) {
    const int gr = F::GROUPS == 1 ? 0 : word;
    float v[4];
    GQ_UNROLL
    for (int b = 0; b < 4; ++b) {
      const float q = code_value<F>(codes[word], b);
      v[b] = F::HAS_MIN ? mul_sub_rn(s[gr], q, m[gr]) : s[gr] * q;
    }
    pairs[2 * word] = pack_pair<BF16>(v[0], v[1]);
    pairs[2 * word + 1] = pack_pair<BF16>(v[2], v[3]);
  }
}

// Chunk `index` (row-major over [E, N, n_in / 32]; below 2^32) of the decode into bf16 (else
// fp16) values, with 16-byte stores (VEC) or 2-byte ones.
template <class F, bool BF16, bool VEC>
GQ_DEV void decode_chunk(const DecodeParams& p, uint32_t index) {
  constexpr int SUBS = F::BE / 32;
  const uint32_t chunks_per_row = static_cast<uint32_t>(p.n_in) / 32;
  const uint32_t row = index / chunks_per_row, c = index - row * chunks_per_row;
  const uint32_t e = row / static_cast<uint32_t>(p.n_rows), n = row - e * p.n_rows;
  const uint8_t* block = p.w + e * p.w_stride_e + n * p.w_stride_n +
                         static_cast<int64_t>(c / SUBS) * F::BB;

  uint32_t pairs[16];  // values 2i (low half) and 2i + 1 (high half), as out's bits
  GQ_UNROLL
  for (int t = 0; t < 4; ++t) {
    uint32_t codes[2], lane_pairs[4];
    float s[F::GROUPS], m[F::GROUPS];
    F::chunk(block, c % SUBS, t, codes, s, m, F::global_table());  // a table through L1
    scaled_pairs<F, BF16>(codes, s, m, lane_pairs);
    GQ_UNROLL
    for (int word = 0; word < 2; ++word) {
      const int at = (16 * word + 4 * t) / 2;  // the pair of values 16 word + 4t (+ 1)
      pairs[at] = lane_pairs[2 * word];
      pairs[at + 1] = lane_pairs[2 * word + 1];
    }
  }

  uint16_t* out = static_cast<uint16_t*>(p.out) + e * p.out_stride_e + n * p.out_stride_n +
                  static_cast<int64_t>(32) * c;
  if (VEC) {
    GQ_UNROLL
    for (int i = 0; i < 4; ++i)
      store_16_bytes(out + 8 * i, pairs[4 * i], pairs[4 * i + 1], pairs[4 * i + 2],
                     pairs[4 * i + 3]);
  } else {
    GQ_UNROLL
    for (int i = 0; i < 16; ++i) {
      out[2 * i] = static_cast<uint16_t>(pairs[i] & 0xFFFF);
      out[2 * i + 1] = static_cast<uint16_t>(pairs[i] >> 16);
    }
  }
}

#if defined(__CUDACC__)
template <class F, bool BF16, bool VEC>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(const DecodeParams p,
                                                                 uint32_t chunks) {
  const uint32_t i = blockIdx.x * kDecodeThreads + threadIdx.x;
  if (i < chunks) decode_chunk<F, BF16, VEC>(p, i);
}
#endif

}  // namespace GPUQ_TARGET
}  // namespace gpuq
