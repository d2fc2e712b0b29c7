// The GGUF formats as the gpuq GEMM reads them: every format is small integer codes times a float
// scale per group of 16 or 32 values, less a float min per group for some:
//
//     W[n, k] = s[n, group(k)] * (code[n, k] - OFF) - m[n, group(k)]
//
// with the codes exactly representable as int8 (and so as bf16 and fp16), and s, m computed
// with the reference's float32 operations (docs/quantized-formats.md). The GEMM multiplies the
// codes on the tensor cores and applies s and m to each group's partial sums in float32
// (gpuq_kernel.h), so no weight is ever rounded.
//
// ALIGN: the byte alignment its loads need of the tensor's address and strides.
//
// Each format gives, for one 32-value chunk `ch` of a block at `p` and the lane's column group
// t = lane % 4, the lane's 8 codes of the chunk as two words (layout "L16": word w holds the
// codes of values 16w + 4t + b in byte b, b = 0..3), and the scales and mins of the chunk's
// groups: one (GROUPS = 1, groups of 32) or one per word (GROUPS = 2, groups of 16). A format
// with a lookup table too large for registers (TABLE_WORDS > 0: the IQ2_XS and IQ3_S grids)
// reads it at `tab`: the GEMM's copy in shared memory, or global_table() itself.
//
// CODE says how the bytes are read: U7 unsigned 0..127 (OFF subtracted), S6 signed in
// [-64, 63], S8 any int8.
#pragma once
#include "gpuq_prims.h"
#include "gpuq_tables.inc"  // IQ4_NL / MXFP4 levels, IQ2_XS grid and signs, IQ3_S grid

namespace gpuq {
inline namespace GPUQ_TARGET {

enum CodeKind { U7, S6, S8 };

// 4 bytes (n = 0..3) whose low 4 bits index a 16-entry int8 table (4 words): the 4 entries, in
// the same byte order. Two byte permutes over the low and high halves of the table, a third
// picks by bit 3 of each index.
GQ_DEV uint32_t table16(uint32_t idx_bytes, const uint32_t tab[4]) {
  // pack the 4 indices into the 4 nibbles a byte permute reads
  const uint32_t packed = (idx_bytes & 0xF) | ((idx_bytes >> 4) & 0xF0) |
                          ((idx_bytes >> 8) & 0xF00) | ((idx_bytes >> 12) & 0xF000);
  const uint32_t lo = byte_perm(tab[0], tab[1], packed & 0x7777);
  const uint32_t hi = byte_perm(tab[2], tab[3], packed & 0x7777);
  return byte_perm(lo, hi, 0x3210 | ((packed & 0x8888) >> 1));
}

// Byte `off` of a block (a constant once the kernel's loops are unrolled) read through the
// aligned word (A = 4) or half-word (A = 2) that holds it: the header bytes of a block then cost
// one load per word, shared by all the block's chunks (the loads of one address merge).
template <int A>
GQ_DEV uint32_t header_byte(const uint8_t* p, int off) {
  if (A >= 4) return (load_u32(p + (off & ~3)) >> (8 * (off & 3))) & 0xFF;
  if (A == 2) return (load_u16(p + (off & ~1)) >> (8 * (off & 1))) & 0xFF;
  return load_u8(p + off);
}

// The fp16 field at byte `off` (2-byte aligned) as a float, through the aligned word holding it.
template <int A>
GQ_DEV float header_half(const uint8_t* p, int off) {
  const uint32_t h = A >= 4 ? (load_u32(p + (off & ~3)) >> (8 * (off & 2))) & 0xFFFF
                            : load_u16(p + off);
  return half_bits_to_float(h);
}

// Bit i of the 4-bit x to bit 8i: each byte of the result 0 or 1.
GQ_DEV uint32_t spread4(uint32_t x) { return (x * 0x00204081u) & 0x01010101u; }

// The 6-bit scale and min of sub-block s of a Q4_K / Q5_K block at p (12 bytes at p + 4; the
// blocks are 4-byte aligned: three word loads a block).
GQ_DEV void k_scale_min(const uint8_t* p, int s, uint32_t& sc, uint32_t& m) {
  if (s < 4) {
    sc = header_byte<4>(p, 4 + s) & 63;
    m = header_byte<4>(p, 8 + s) & 63;
  } else {
    sc = (header_byte<4>(p, 8 + s) & 15) | ((header_byte<4>(p, s) >> 6) << 4);
    m = (header_byte<4>(p, 8 + s) >> 4) | ((header_byte<4>(p, 4 + s) >> 6) << 4);
  }
}

// Q4_K / Q5_K: the scale d * sc and min dmin * m of sub-block s of the block at p.
GQ_DEV void k_scale_and_min(const uint8_t* p, int s, float& scale, float& min) {
  uint32_t sc, mn;
  k_scale_min(p, s, sc, mn);
  scale = header_half<4>(p, 0) * small_uint_to_float(sc);
  min = header_half<4>(p, 2) * small_uint_to_float(mn);
}

struct FmtQ4_0 {
  static constexpr int BE = 32, BB = 18, ALIGN = 2, GROUPS = 1, OFF = 8;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint32_t q = load_u32_a2(p + 2 + 4 * t);  // byte j: value j (low), j + 16 (high)
    w[0] = q & 0x0F0F0F0F;
    w[1] = (q >> 4) & 0x0F0F0F0F;
    s[0] = half_bits_to_float(load_u16(p));
    m[0] = 0.f;
  }
};

struct FmtQ5_0 {
  static constexpr int BE = 32, BB = 22, ALIGN = 2, GROUPS = 1, OFF = 16;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint32_t qh = load_u32_a2(p + 2);  // bit j: bit 4 of value j
    const uint32_t q = load_u32_a2(p + 6 + 4 * t);
    w[0] = (q & 0x0F0F0F0F) | (spread4((qh >> (4 * t)) & 15) << 4);
    w[1] = ((q >> 4) & 0x0F0F0F0F) | (spread4((qh >> (16 + 4 * t)) & 15) << 4);
    s[0] = half_bits_to_float(load_u16(p));
    m[0] = 0.f;
  }
};

struct FmtQ8_0 {
  static constexpr int BE = 32, BB = 34, ALIGN = 2, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S8;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    w[0] = load_u32_a2(p + 2 + 4 * t);
    w[1] = load_u32_a2(p + 18 + 4 * t);
    s[0] = half_bits_to_float(load_u16(p));
    m[0] = 0.f;
  }
};

struct FmtIQ4_NL {
  static constexpr int BE = 32, BB = 18, ALIGN = 2, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S8;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint32_t q = load_u32_a2(p + 2 + 4 * t);
    w[0] = table16(q, iq4nl_words().w);
    w[1] = table16(q >> 4, iq4nl_words().w);
    s[0] = half_bits_to_float(load_u16(p));
    m[0] = 0.f;
  }
};

struct FmtMXFP4 {
  static constexpr int BE = 32, BB = 17, ALIGN = 1, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S6;  // the doubled e2m1 values: -12 .. 12
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint32_t q = load_u32_a1(p + 1 + 4 * t);
    w[0] = table16(q, mxfp4_words().w);
    w[1] = table16(q >> 4, mxfp4_words().w);
    const uint32_t e = load_u8(p);  // 2^(e - 128), subnormal for e < 2
    s[0] = as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
    m[0] = 0.f;
  }
};

struct FmtIQ4_XS {
  static constexpr int BE = 256, BB = 136, ALIGN = 4, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S8;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint32_t q = load_u32(p + 8 + 16 * ch + 4 * t);
    w[0] = table16(q, iq4nl_words().w);
    w[1] = table16(q >> 4, iq4nl_words().w);
    const uint32_t high = (load_u32(p) >> (16 + 2 * ch)) & 3;  // the word holds d too
    const uint32_t low = (header_byte<4>(p, 4 + ch / 2) >> (4 * (ch % 2))) & 15;
    s[0] = header_half<4>(p, 0) * (small_uint_to_float(low | (high << 4)) - 32.0f);
    m[0] = 0.f;
  }
};

struct FmtQ4_K {
  static constexpr int BE = 256, BB = 144, ALIGN = 4, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = true;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint8_t* qs = p + 16 + 32 * (ch / 2) + 4 * t;  // byte j: value j of sub-block 2c, 2c+1
    const int shift = 4 * (ch % 2);
    w[0] = (load_u32(qs) >> shift) & 0x0F0F0F0F;
    w[1] = (load_u32(qs + 16) >> shift) & 0x0F0F0F0F;
    k_scale_and_min(p, ch, s[0], m[0]);
  }
};

struct FmtQ5_K {
  static constexpr int BE = 256, BB = 176, ALIGN = 4, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = true;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t*) {
    const uint8_t* qs = p + 48 + 32 * (ch / 2) + 4 * t;
    const uint8_t* qh = p + 16 + 4 * t;  // bit ch of byte j: bit 4 of value j of sub-block ch
    const int shift = 4 * (ch % 2);
    w[0] = ((load_u32(qs) >> shift) & 0x0F0F0F0F) | (((load_u32(qh) >> ch) & 0x01010101) << 4);
    w[1] = ((load_u32(qs + 16) >> shift) & 0x0F0F0F0F) |
           (((load_u32(qh + 16) >> ch) & 0x01010101) << 4);
    k_scale_and_min(p, ch, s[0], m[0]);
  }
};

struct FmtQ6_K {
  static constexpr int BE = 256, BB = 210, ALIGN = 2, GROUPS = 2, OFF = 32;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[2], float m[2],
                           const uint32_t*) {
    const int h = ch / 4, k = ch % 4;  // 128-value half, 32-value quarter of it
    const float d = half_bits_to_float(load_u16(p + 208));
    for (int i = 0; i < 2; ++i) {
      const int j = 16 * i + 4 * t;
      const uint32_t ql = load_u32_a2(p + 64 * h + 32 * (k % 2) + j);
      const uint32_t qh = load_u32_a2(p + 128 + 32 * h + j);
      w[i] = ((ql >> (4 * (k / 2))) & 0x0F0F0F0F) | (((qh >> (2 * k)) & 0x03030303) << 4);
      const int8_t sc = static_cast<int8_t>(header_byte<2>(p, 192 + 2 * ch + i));
      s[i] = d * (small_uint_to_float(static_cast<uint32_t>(sc + 128)) - 128.0f);
      m[i] = 0.f;
    }
  }
};

struct FmtQ3_K {
  static constexpr int BE = 256, BB = 110, ALIGN = 2, GROUPS = 2, OFF = 4;
  static constexpr CodeKind CODE = U7;  // q2 + 4 * hbit
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[2], float m[2],
                           const uint32_t*) {
    const int h = ch / 4, k = ch % 4;
    const float d = half_bits_to_float(load_u16(p + 108));
    for (int i = 0; i < 2; ++i) {
      const int j = 16 * i + 4 * t;
      const uint32_t q2 = (load_u32_a2(p + 32 + 32 * h + j) >> (2 * k)) & 0x03030303;
      const uint32_t hb = (load_u32_a2(p + j) >> ch) & 0x01010101;
      w[i] = q2 | (hb << 2);
      const int g = 2 * ch + i;  // the 16-value group: its 6-bit scale
      const uint32_t low = (header_byte<2>(p, 96 + g % 8) >> (4 * (g / 8))) & 15;
      const uint32_t high = (header_byte<2>(p, 104 + g % 4) >> (2 * (g / 4))) & 3;
      s[i] = d * (small_uint_to_float(low | (high << 4)) - 32.0f);
      m[i] = 0.f;
    }
  }
};

struct FmtQ2_K {
  static constexpr int BE = 256, BB = 84, ALIGN = 4, GROUPS = 2, OFF = 0;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = true;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[2], float m[2],
                           const uint32_t*) {
    const int h = ch / 4, k = ch % 4;
    const float d = header_half<4>(p, 80);
    const float dmin = header_half<4>(p, 82);
    for (int i = 0; i < 2; ++i) {
      w[i] = (load_u32(p + 16 + 32 * h + 16 * i + 4 * t) >> (2 * k)) & 0x03030303;
      const uint32_t sb = header_byte<4>(p, 2 * ch + i);
      s[i] = d * small_uint_to_float(sb & 15);
      m[i] = dmin * small_uint_to_float(sb >> 4);
    }
  }
};

// Four grid magnitudes (bytes of g) with the signs of the 4-bit `neg`: -x where set. Bytewise
// (x ^ 0xFF) + 1 = -x: no carry leaves a byte, every magnitude being 1..255.
GQ_DEV uint32_t apply_signs4(uint32_t g, uint32_t neg) {
  const uint32_t ones = spread4(neg);
  return (g ^ (ones * 0xFF)) + ones;
}

struct FmtIQ2_XS {
  static constexpr int BE = 256, BB = 74, ALIGN = 2, GROUPS = 2, OFF = 0;
  static constexpr CodeKind CODE = S6;  // +-{8, 25, 43}
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 1024 + 32;  // the grid, two words a row; the sign bytes
  GQ_DEV static const uint32_t* global_table() { return kIQ2XSTable; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[2], float m[2],
                           const uint32_t* tab) {
    const float d = half_bits_to_float(load_u16(p));
    const uint32_t ls = header_byte<2>(p, 66 + ch);  // low nibble: group 2ch, high: 2ch + 1
    for (int i = 0; i < 2; ++i) {
      const int g8 = 4 * ch + 2 * i + t / 2;  // the group of 8 holding values 16i + 4t .. + 3
      const uint32_t word = load_u16(p + 2 + 2 * g8);
      const uint32_t grid = tab[2 * (word & 511) + t % 2];
      const uint32_t signs = reinterpret_cast<const uint8_t*>(tab + 1024)[word >> 9];
      const uint32_t neg = (signs >> (4 * (t % 2))) & 15;
      w[i] = apply_signs4(grid, neg);
      s[i] = (d * (small_uint_to_float((ls >> (4 * i)) & 15) + 0.5f)) * 0.25f;
      m[i] = 0.f;
    }
  }
};

struct FmtIQ3_S {
  static constexpr int BE = 256, BB = 110, ALIGN = 2, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S6;  // +-{1, 3, .., 15}
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 512;  // the grid
  GQ_DEV static const uint32_t* global_table() { return kIQ3SGrid; }
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float s[1], float m[1],
                           const uint32_t* tab) {
    const uint32_t qh = header_byte<2>(p, 66 + ch);  // bit g % 8: bit 8 of group g's index
    for (int i = 0; i < 2; ++i) {
      const int g4 = 8 * ch + 4 * i + t;  // the group of 4 values 16i + 4t .. + 3
      const uint32_t idx = load_u8(p + 2 + g4) | (((qh >> (4 * i + t)) & 1) << 8);
      const uint32_t neg = (load_u8(p + 74 + 4 * ch + 2 * i + t / 2) >> (4 * (t % 2))) & 15;
      w[i] = apply_signs4(tab[idx], neg);
    }
    const uint32_t ls = (header_byte<2>(p, 106 + ch / 2) >> (4 * (ch % 2))) & 15;
    s[0] = half_bits_to_float(load_u16(p)) * small_uint_to_float(1 + 2 * ls);
    m[0] = 0.f;
  }
};

}  // namespace GPUQ_TARGET
}  // namespace gpuq
