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
// reads), forms the 32 values and writes them as 64 contiguous bytes: four 16-byte stores where
// out and its strides are 16-byte aligned, else 32 2-byte stores.
//
// Launch shape: kDecodeThreads threads per block, one thread per chunk, chunks in row-major
// order (a warp writes 2 KB of one row), a 1-D grid of ceil(chunks / kDecodeThreads) blocks.
// Limits: n_in a multiple of the format's block; E * N * n_in / 32 chunks below 2^31 * 256.
#pragma once
#include "gpuq_formats.h"
#include "gpuq_params.h"

namespace gpuq {
inline namespace GPUQ_TARGET {

constexpr int kDecodeThreads = 256;

// The 16-bit bits of v in out's type (kBf16 or kFp16), rounded to nearest even.
GQ_DEV uint32_t half_bits_of(float v, int out_kind) {
  return out_kind == kBf16 ? float_to_bf16_bits(v) : float_to_half_bits(v);
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

// Chunk `index` (row-major over [E, N, n_in / 32]) of the decode.
template <class F>
GQ_DEV void decode_chunk(const DecodeParams& p, int64_t index) {
  constexpr int SUBS = F::BE / 32;
  const int chunks_per_row = p.n_in / 32;
  const int64_t row = index / chunks_per_row;
  const int c = static_cast<int>(index % chunks_per_row);
  const int64_t e = row / p.n_rows, n = row % p.n_rows;
  const uint8_t* block =
      p.w + e * p.w_stride_e + n * p.w_stride_n + static_cast<int64_t>(c / SUBS) * F::BB;

  uint32_t pairs[16];  // values 2i (low half) and 2i + 1 (high half), as out's bits
GQ_UNROLL
  for (int t = 0; t < 4; ++t) {
    uint32_t codes[2];
    float s[F::GROUPS], m[F::GROUPS];
    F::chunk(block, c % SUBS, t, codes, s, m);
GQ_UNROLL
    for (int word = 0; word < 2; ++word) {
      const int gr = F::GROUPS == 1 ? 0 : word;
GQ_UNROLL
      for (int b = 0; b < 4; ++b) {
        const uint32_t byte = (codes[word] >> (8 * b)) & 0xFF;
        const int q = F::CODE == U7 ? static_cast<int>(byte) - F::OFF
                                    : static_cast<int>(static_cast<int8_t>(byte));
        const float v = F::HAS_MIN ? mul_sub_rn(s[gr], static_cast<float>(q), m[gr])
                                   : s[gr] * static_cast<float>(q);
        const int at = 16 * word + 4 * t + b;  // the value's place in the chunk
        const uint32_t bits = half_bits_of(v, p.out_kind);
        if (at % 2 == 0) pairs[at / 2] = bits;
        else pairs[at / 2] |= bits << 16;
      }
    }
  }

  uint16_t* out = static_cast<uint16_t*>(p.out) + e * p.out_stride_e + n * p.out_stride_n +
                  static_cast<int64_t>(32) * c;
  if (p.vector_stores) {
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
template <class F>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(const DecodeParams p,
                                                                 int64_t chunks) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDecodeThreads + threadIdx.x;
  if (i < chunks) decode_chunk<F>(p, i);
}
#endif

}  // namespace GPUQ_TARGET
}  // namespace gpuq
