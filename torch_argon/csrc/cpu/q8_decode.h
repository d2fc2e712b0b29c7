// The weights' side of the q8 integer GEMM (moe_qmm with activation_quant="q8"): each GGUF format
// read as integer codes with float scales, so that over one sub-block of SUB values (16 or 32)
//
//     W[i] = s * code[i] - m          (code: int8; s, m: float32; m = 0 for formats without mins)
//
// equals the exact dequant of quant_blocks.h (docs/quantized-formats.md) up to its float32
// rounding: s and m are computed with the very operations quant_blocks.h uses for its scale
// (d * sub-scale) and min, and code * s is the product it rounds once. The GEMM then takes
// sum_i x[i] W[i] = s * sum_i q[i] code[i] - m * sum_i q[i] per sub-block, the first sum in
// integers (exact).
//
// Per format, a struct with
//   kValues: values per GGUF block (32 or 256);
//   kSub:   values per scale (16 for Q6_K, Q3_K, Q2_K, IQ2_XS; 32 otherwise);
//   kMin:   whether the format subtracts a min (Q4_K, Q5_K, Q2_K);
//   chunk(b, c, code, s, m): values 32c .. 32c+31 of block b as 32 codes and 32 / kSub scales
//   (and mins).
// Torch-free (the ISA kernel files include it and compile on their own); the block structs and
// field readers come from shared/quant_blocks.h (plain C++ here).
#pragma once
#include <cstdint>

#include "shared/quant_blocks.h"

namespace argon::q8 {

using argon_quant::f16_at;
using argon_quant::i8;
using argon_quant::k_min;
using argon_quant::k_scale;
using argon_quant::u16_at;
using argon_quant::u32_at;

#define ARGON_Q8_INLINE __attribute__((always_inline)) inline

// The IQ4_NL and MXFP4 levels as int8 (quant_tables.h holds them as floats, all integers).
struct LevelTables {
  int8_t iq4_nl[16], mxfp4[16];
  LevelTables() {
    for (int i = 0; i < 16; ++i) {
      iq4_nl[i] = static_cast<int8_t>(argon_quant::IQ4_NL_VALUES[i]);
      mxfp4[i] = static_cast<int8_t>(argon_quant::MXFP4_VALUES_X2[i]);
    }
  }
};
inline const LevelTables kLevels;

struct DecodeQ8_0 {
  using Block = argon_quant::block_q8_0;
  static constexpr int kValues = 32;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t, int8_t* code, float* s, float*) {
    s[0] = f16_at(b->d);
    for (int j = 0; j < 32; ++j) code[j] = static_cast<int8_t>(b->qs[j]);
  }
};

struct DecodeQ4_0 {
  using Block = argon_quant::block_q4_0;
  static constexpr int kValues = 32;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t, int8_t* code, float* s, float*) {
    s[0] = f16_at(b->d);
    for (int j = 0; j < 16; ++j) {
      code[j] = static_cast<int8_t>((b->qs[j] & 15) - 8);
      code[j + 16] = static_cast<int8_t>((b->qs[j] >> 4) - 8);
    }
  }
};

struct DecodeQ5_0 {
  using Block = argon_quant::block_q5_0;
  static constexpr int kValues = 32;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t, int8_t* code, float* s, float*) {
    s[0] = f16_at(b->d);
    const uint32_t qh = u32_at(b->qh);
    for (int j = 0; j < 16; ++j) {
      code[j] = static_cast<int8_t>(((b->qs[j] & 15) | (((qh >> j) & 1) << 4)) - 16);
      code[j + 16] = static_cast<int8_t>(((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
    }
  }
};

struct DecodeIq4Nl {
  using Block = argon_quant::block_iq4_nl;
  static constexpr int kValues = 32;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t, int8_t* code, float* s, float*) {
    s[0] = f16_at(b->d);
    for (int j = 0; j < 16; ++j) {
      code[j] = kLevels.iq4_nl[b->qs[j] & 15];
      code[j + 16] = kLevels.iq4_nl[b->qs[j] >> 4];
    }
  }
};

struct DecodeMxfp4 {
  using Block = argon_quant::block_mxfp4;
  static constexpr int kValues = 32;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t, int8_t* code, float* s, float*) {
    const uint32_t e = b->e;
    s[0] = argon_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    for (int j = 0; j < 16; ++j) {
      code[j] = kLevels.mxfp4[b->qs[j] & 15];
      code[j + 16] = kLevels.mxfp4[b->qs[j] >> 4];
    }
  }
};

struct DecodeIq4Xs {
  using Block = argon_quant::block_iq4_xs;
  static constexpr int kValues = 256;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float*) {
    const uint32_t ls = ((b->scales_l[c / 2] >> (4 * (c % 2))) & 15u) |
                        (((u16_at(b->scales_h) >> (2 * c)) & 3u) << 4);
    s[0] = f16_at(b->d) * float(int(ls) - 32);
    const uint8_t* qs = b->qs + 16 * c;
    for (int j = 0; j < 16; ++j) {
      code[j] = kLevels.iq4_nl[qs[j] & 15];
      code[j + 16] = kLevels.iq4_nl[qs[j] >> 4];
    }
  }
};

struct DecodeQ4_K {
  using Block = argon_quant::block_q4_k;
  static constexpr int kValues = 256;
  static constexpr int kSub = 32;
  static constexpr bool kMin = true;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float* m) {
    s[0] = f16_at(b->d) * float(k_scale(b->scales, c));
    m[0] = f16_at(b->dmin) * float(k_min(b->scales, c));
    const uint8_t* qs = b->qs + 32 * (c / 2);
    const int shift = 4 * (c % 2);
    for (int j = 0; j < 32; ++j) code[j] = static_cast<int8_t>((qs[j] >> shift) & 15);
  }
};

struct DecodeQ5_K {
  using Block = argon_quant::block_q5_k;
  static constexpr int kValues = 256;
  static constexpr int kSub = 32;
  static constexpr bool kMin = true;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float* m) {
    s[0] = f16_at(b->d) * float(k_scale(b->scales, c));
    m[0] = f16_at(b->dmin) * float(k_min(b->scales, c));
    const uint8_t* qs = b->qs + 32 * (c / 2);
    const int shift = 4 * (c % 2);
    for (int j = 0; j < 32; ++j) {
      code[j] = static_cast<int8_t>(((qs[j] >> shift) & 15) | (((b->qh[j] >> c) & 1) << 4));
    }
  }
};

struct DecodeQ6_K {
  using Block = argon_quant::block_q6_k;
  static constexpr int kValues = 256;
  static constexpr int kSub = 16;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float*) {
    const float d = f16_at(b->d);
    const uint32_t h = c / 4, k = c % 4;
    const uint8_t* ql = b->ql + 64 * h + 32 * (k % 2);
    const uint8_t* qh = b->qh + 32 * h;
    s[0] = d * float(i8(b->scales[2 * c]));
    s[1] = d * float(i8(b->scales[2 * c + 1]));
    for (int j = 0; j < 32; ++j) {
      const int q = ((ql[j] >> (4 * (k / 2))) & 15) | (((qh[j] >> (2 * k)) & 3) << 4);
      code[j] = static_cast<int8_t>(q - 32);
    }
  }
};

struct DecodeIq2Xs {
  using Block = argon_quant::block_iq2_xs;
  static constexpr int kValues = 256;
  static constexpr int kSub = 16;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float*) {
    const float d = f16_at(b->d);
    for (int half = 0; half < 2; ++half) {
      const uint32_t ls = (b->scales[c] >> (4 * half)) & 15u;
      s[half] = (d * (float(ls) + 0.5f)) * 0.25f;
    }
    for (int g4 = 0; g4 < 4; ++g4) {
      const uint32_t w = u16_at(b->qs + 2 * (4 * c + g4));
      const uint64_t grid = argon_quant::IQ2XS_GRID[w & 511u];
      const uint32_t signs = argon_quant::IQ2XS_SIGNS[w >> 9];
      for (int k = 0; k < 8; ++k) {
        const int g = int((grid >> (8 * k)) & 255u);
        code[8 * g4 + k] = static_cast<int8_t>((signs >> k) & 1 ? -g : g);
      }
    }
  }
};

struct DecodeQ3_K {
  using Block = argon_quant::block_q3_k;
  static constexpr int kValues = 256;
  static constexpr int kSub = 16;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float*) {
    const float d = f16_at(b->d);
    const uint32_t h = c / 4, k = c % 4;
    const uint8_t* qs = b->qs + 32 * h;
    for (int half = 0; half < 2; ++half) {
      const uint32_t t = 2 * c + half;
      const uint32_t u = ((b->scales[t % 8] >> (4 * (t / 8))) & 15u) |
                         (((b->scales[8 + t % 4] >> (2 * (t / 4))) & 3u) << 4);
      s[half] = d * float(int(u) - 32);
    }
    for (int j = 0; j < 32; ++j) {
      const int q = int((qs[j] >> (2 * k)) & 3) - (((b->hmask[j] >> c) & 1) ? 0 : 4);
      code[j] = static_cast<int8_t>(q);
    }
  }
};

struct DecodeIq3S {
  using Block = argon_quant::block_iq3_s;
  static constexpr int kValues = 256;
  static constexpr int kSub = 32;
  static constexpr bool kMin = false;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float*) {
    const uint32_t ls = (b->scales[c / 2] >> (4 * (c % 2))) & 15u;
    s[0] = f16_at(b->d) * float(1u + 2u * ls);
    for (int g8 = 0; g8 < 8; ++g8) {
      const uint32_t g = 8 * c + g8;
      const uint32_t grid =
          argon_quant::IQ3S_GRID[b->qs[g] | (((b->qh[g / 8] >> (g % 8)) & 1u) << 8)];
      const uint32_t signs = b->signs[g / 2];
      for (int k = 0; k < 4; ++k) {
        const int v = int((grid >> (8 * k)) & 255u);
        code[4 * g8 + k] = static_cast<int8_t>((signs >> (4 * (g % 2) + k)) & 1 ? -v : v);
      }
    }
  }
};

struct DecodeQ2_K {
  using Block = argon_quant::block_q2_k;
  static constexpr int kValues = 256;
  static constexpr int kSub = 16;
  static constexpr bool kMin = true;
  ARGON_Q8_INLINE static void chunk(const Block* b, uint32_t c, int8_t* code, float* s, float* m) {
    const float d = f16_at(b->d), dmin = f16_at(b->dmin);
    const uint32_t h = c / 4, k = c % 4;
    const uint8_t* qs = b->qs + 32 * h;
    for (int half = 0; half < 2; ++half) {
      const uint32_t sb = b->scales[2 * c + half];
      s[half] = d * float(sb & 15u);
      m[half] = dmin * float(sb >> 4);
    }
    for (int j = 0; j < 32; ++j) code[j] = static_cast<int8_t>((qs[j] >> (2 * k)) & 3);
  }
};

// The decoders in the order of ARGON_QUANT_FORMATS (quant_params.h): X(Decode, ggml type id).
#define ARGON_Q8_DECODERS(X) \
  X(DecodeQ8_0, 8)           \
  X(DecodeQ4_0, 2)           \
  X(DecodeQ5_0, 6)           \
  X(DecodeIq4Nl, 20)         \
  X(DecodeMxfp4, 39)         \
  X(DecodeIq4Xs, 23)         \
  X(DecodeQ4_K, 12)          \
  X(DecodeQ5_K, 13)          \
  X(DecodeQ6_K, 14)          \
  X(DecodeIq2Xs, 17)         \
  X(DecodeQ3_K, 11)          \
  X(DecodeIq3S, 21)          \
  X(DecodeQ2_K, 10)

// The decoder index of ggml type `qtype` (its place in ARGON_Q8_DECODERS), or -1.
inline int format_index(int64_t qtype) {
  int i = 0;
#define ARGON_Q8_INDEX(D, id) \
  if (qtype == id) return i;  \
  ++i;
  ARGON_Q8_DECODERS(ARGON_Q8_INDEX)
#undef ARGON_Q8_INDEX
  return -1;
}

// kSub and kMin of the decoder at `index`.
inline int format_sub(int index) {
  static constexpr int subs[] = {
#define ARGON_Q8_SUB(D, id) D::kSub,
      ARGON_Q8_DECODERS(ARGON_Q8_SUB)
#undef ARGON_Q8_SUB
  };
  return subs[index];
}
inline bool format_has_min(int index) {
  static constexpr bool mins[] = {
#define ARGON_Q8_MIN(D, id) D::kMin,
      ARGON_Q8_DECODERS(ARGON_Q8_MIN)
#undef ARGON_Q8_MIN
  };
  return mins[index];
}

}  // namespace argon::q8
