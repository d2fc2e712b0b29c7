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
//
// `chunk` is two steps, so that a kernel can keep the loads of later chunks in flight while it
// decodes this one (the pipelined loop of gpuq_kernel.h): `load` fills the format's Raw with the
// lane's words of chunk ch exactly as the loads return them (no arithmetic on a loaded value:
// one that waited for its load would stall the warp where the load was issued), and `decode`
// makes the codes, scales and mins from a Raw. SplitChunk gives every format its `chunk`, the
// two steps back to back.
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

// The aligned word (A = 4), half-word (A = 2) or byte (A = 1) of a block holding byte `off` (a
// constant once the kernel's loops are unrolled): the header bytes of a block then cost one load
// per word, shared by all the block's chunks (the loads of one address merge).
template <int A>
GQ_DEV uint32_t header_word(const uint8_t* p, int off) {
  if (A >= 4) return load_u32(p + (off & ~3));
  if (A == 2) return load_u16(p + (off & ~1));
  return load_u8(p + off);
}

// Byte `off` of a block from the header_word<A> that holds it.
template <int A>
GQ_DEV uint32_t byte_of_word(uint32_t word, int off) {
  if (A >= 4) return (word >> (8 * (off & 3))) & 0xFF;
  if (A == 2) return (word >> (8 * (off & 1))) & 0xFF;
  return word;
}

// The fp16 field at byte `off` (2-byte aligned) from the header_word<A> (A >= 2) that holds it.
template <int A>
GQ_DEV float half_of_word(uint32_t word, int off) {
  return half_bits_to_float(A >= 4 ? (word >> (8 * (off & 2))) & 0xFFFF : word);
}

template <int A>
GQ_DEV uint32_t header_byte(const uint8_t* p, int off) {
  return byte_of_word<A>(header_word<A>(p, off), off);
}

template <int A>
GQ_DEV float header_half(const uint8_t* p, int off) {
  return half_of_word<A>(header_word<A >= 4 ? 4 : 2>(p, off), off);
}

// 4 bytes at a 2-byte aligned address as its two half-words (load_halves), joined (join_halves).
GQ_DEV void load_halves(const uint8_t* p, uint32_t h[2]) {
  h[0] = load_u16(p);
  h[1] = load_u16(p + 2);
}
GQ_DEV uint32_t join_halves(const uint32_t h[2]) { return h[0] | (h[1] << 16); }

// 4 bytes at any address as its four bytes, joined.
GQ_DEV void load_bytes4(const uint8_t* p, uint32_t b[4]) {
  for (int i = 0; i < 4; ++i) b[i] = load_u8(p + i);
}
GQ_DEV uint32_t join_bytes4(const uint32_t b[4]) {
  return b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24);
}

// A format's `chunk` as its `load` then its `decode` (F derives from SplitChunk<F>).
template <class F>
struct SplitChunk {
  GQ_DEV static void chunk(const uint8_t* p, int ch, int t, uint32_t w[2], float* s, float* m,
                           const uint32_t* tab) {
    typename F::Raw r;
    F::load(p, ch, t, r);
    F::decode(r, ch, t, w, s, m, tab);
  }
};

// Bit i of the 4-bit x to bit 8i: each byte of the result 0 or 1.
GQ_DEV uint32_t spread4(uint32_t x) { return (x * 0x00204081u) & 0x01010101u; }

// Q4_K / Q5_K: the scale d * sc and min dmin * m of sub-block s from the block's 16-byte header
// (h: its four words; word 0 holds d and dmin, bytes 4..15 the 6-bit scales and mins). Every
// byte sub-block s reads is byte s % 4 of words 1, 2 or 3: the words are chosen by constant
// indices, so a run-time s never indexes h (which would put it in local memory).
GQ_DEV void k_scale_and_min(const uint32_t h[4], int s, float& scale, float& min) {
  const int shift = 8 * (s & 3);
  const uint32_t b1 = (h[1] >> shift) & 0xFF;  // byte 4 + s % 4
  const uint32_t b2 = (h[2] >> shift) & 0xFF;  // byte 8 + s % 4
  const uint32_t b3 = (h[3] >> shift) & 0xFF;  // byte 12 + s % 4
  uint32_t sc, mn;
  if (s < 4) {
    sc = b1 & 63;
    mn = b2 & 63;
  } else {  // the low 4 bits in byte 8 + s, the high 2 in the top bits of bytes s and 4 + s
    sc = (b3 & 15) | ((b1 >> 6) << 4);
    mn = (b3 >> 4) | ((b2 >> 6) << 4);
  }
  scale = half_of_word<4>(h[0], 0) * small_uint_to_float(sc);
  min = half_of_word<4>(h[0], 2) * small_uint_to_float(mn);
}

// The header words sub-block s's scale and min need (the others are never loaded: each Raw
// member a chunk does not read is dead code).
GQ_DEV void k_load_header(const uint8_t* p, uint32_t h[4]) {
  for (int i = 0; i < 4; ++i) h[i] = load_u32(p + 4 * i);
}

struct FmtQ4_0 : SplitChunk<FmtQ4_0> {
  static constexpr int BE = 32, BB = 18, ALIGN = 2, GROUPS = 1, OFF = 8;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q[2], d; };
  GQ_DEV static void load(const uint8_t* p, int, int t, Raw& r) {
    load_halves(p + 2 + 4 * t, r.q);  // byte j: value j (low nibble), j + 16 (high)
    r.d = load_u16(p);
  }
  GQ_DEV static void decode(const Raw& r, int, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    const uint32_t q = join_halves(r.q);
    w[0] = q & 0x0F0F0F0F;
    w[1] = (q >> 4) & 0x0F0F0F0F;
    s[0] = half_bits_to_float(r.d);
    m[0] = 0.f;
  }
};

struct FmtQ5_0 : SplitChunk<FmtQ5_0> {
  static constexpr int BE = 32, BB = 22, ALIGN = 2, GROUPS = 1, OFF = 16;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t qh[2], q[2], d; };
  GQ_DEV static void load(const uint8_t* p, int, int t, Raw& r) {
    load_halves(p + 2, r.qh);  // bit j: bit 4 of value j
    load_halves(p + 6 + 4 * t, r.q);
    r.d = load_u16(p);
  }
  GQ_DEV static void decode(const Raw& r, int, int t, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    const uint32_t qh = join_halves(r.qh), q = join_halves(r.q);
    w[0] = (q & 0x0F0F0F0F) | (spread4((qh >> (4 * t)) & 15) << 4);
    w[1] = ((q >> 4) & 0x0F0F0F0F) | (spread4((qh >> (16 + 4 * t)) & 15) << 4);
    s[0] = half_bits_to_float(r.d);
    m[0] = 0.f;
  }
};

struct FmtQ8_0 : SplitChunk<FmtQ8_0> {
  static constexpr int BE = 32, BB = 34, ALIGN = 2, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S8;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q0[2], q1[2], d; };
  GQ_DEV static void load(const uint8_t* p, int, int t, Raw& r) {
    load_halves(p + 2 + 4 * t, r.q0);
    load_halves(p + 18 + 4 * t, r.q1);
    r.d = load_u16(p);
  }
  GQ_DEV static void decode(const Raw& r, int, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    w[0] = join_halves(r.q0);
    w[1] = join_halves(r.q1);
    s[0] = half_bits_to_float(r.d);
    m[0] = 0.f;
  }
};

struct FmtIQ4_NL : SplitChunk<FmtIQ4_NL> {
  static constexpr int BE = 32, BB = 18, ALIGN = 2, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S8;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q[2], d; };
  GQ_DEV static void load(const uint8_t* p, int, int t, Raw& r) {
    load_halves(p + 2 + 4 * t, r.q);
    r.d = load_u16(p);
  }
  GQ_DEV static void decode(const Raw& r, int, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    const uint32_t q = join_halves(r.q);
    w[0] = table16(q, iq4nl_words().w);
    w[1] = table16(q >> 4, iq4nl_words().w);
    s[0] = half_bits_to_float(r.d);
    m[0] = 0.f;
  }
};

struct FmtMXFP4 : SplitChunk<FmtMXFP4> {
  static constexpr int BE = 32, BB = 17, ALIGN = 1, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S6;  // the doubled e2m1 values: -12 .. 12
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q[4], e; };
  GQ_DEV static void load(const uint8_t* p, int, int t, Raw& r) {
    load_bytes4(p + 1 + 4 * t, r.q);
    r.e = load_u8(p);
  }
  GQ_DEV static void decode(const Raw& r, int, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    const uint32_t q = join_bytes4(r.q);
    w[0] = table16(q, mxfp4_words().w);
    w[1] = table16(q >> 4, mxfp4_words().w);
    const uint32_t e = r.e;  // 2^(e - 128), subnormal for e < 2
    s[0] = as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
    m[0] = 0.f;
  }
};

struct FmtIQ4_XS : SplitChunk<FmtIQ4_XS> {
  static constexpr int BE = 256, BB = 136, ALIGN = 4, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S8;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q, h0, h1; };  // h0: d and the scales' high bits; h1: their low nibbles
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    r.q = load_u32(p + 8 + 16 * ch + 4 * t);
    r.h0 = load_u32(p);
    r.h1 = header_word<4>(p, 4 + ch / 2);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    w[0] = table16(r.q, iq4nl_words().w);
    w[1] = table16(r.q >> 4, iq4nl_words().w);
    const uint32_t high = (r.h0 >> (16 + 2 * ch)) & 3;
    const uint32_t low = (byte_of_word<4>(r.h1, 4 + ch / 2) >> (4 * (ch % 2))) & 15;
    s[0] = half_of_word<4>(r.h0, 0) * (small_uint_to_float(low | (high << 4)) - 32.0f);
    m[0] = 0.f;
  }
};

struct FmtQ4_K : SplitChunk<FmtQ4_K> {
  static constexpr int BE = 256, BB = 144, ALIGN = 4, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = true;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q[2], h[4]; };
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    const uint8_t* qs = p + 16 + 32 * (ch / 2) + 4 * t;  // byte j: value j of sub-block 2c, 2c+1
    r.q[0] = load_u32(qs);
    r.q[1] = load_u32(qs + 16);
    k_load_header(p, r.h);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    const int shift = 4 * (ch % 2);
    w[0] = (r.q[0] >> shift) & 0x0F0F0F0F;
    w[1] = (r.q[1] >> shift) & 0x0F0F0F0F;
    k_scale_and_min(r.h, ch, s[0], m[0]);
  }
};

struct FmtQ5_K : SplitChunk<FmtQ5_K> {
  static constexpr int BE = 256, BB = 176, ALIGN = 4, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = true;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q[2], qh[2], h[4]; };
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    const uint8_t* qs = p + 48 + 32 * (ch / 2) + 4 * t;
    const uint8_t* qh = p + 16 + 4 * t;  // bit ch of byte j: bit 4 of value j of sub-block ch
    r.q[0] = load_u32(qs);
    r.q[1] = load_u32(qs + 16);
    r.qh[0] = load_u32(qh);
    r.qh[1] = load_u32(qh + 16);
    k_load_header(p, r.h);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int, uint32_t w[2], float s[1], float m[1],
                            const uint32_t*) {
    const int shift = 4 * (ch % 2);
    for (int i = 0; i < 2; ++i)
      w[i] = ((r.q[i] >> shift) & 0x0F0F0F0F) | (((r.qh[i] >> ch) & 0x01010101) << 4);
    k_scale_and_min(r.h, ch, s[0], m[0]);
  }
};

struct FmtQ6_K : SplitChunk<FmtQ6_K> {
  static constexpr int BE = 256, BB = 210, ALIGN = 2, GROUPS = 2, OFF = 32;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t ql[2][2], qh[2][2], sc, d; };
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    const int h = ch / 4, k = ch % 4;  // 128-value half, 32-value quarter of it
    for (int i = 0; i < 2; ++i) {
      const int j = 16 * i + 4 * t;
      load_halves(p + 64 * h + 32 * (k % 2) + j, r.ql[i]);
      load_halves(p + 128 + 32 * h + j, r.qh[i]);
    }
    r.sc = header_word<2>(p, 192 + 2 * ch);  // the int8 scales of groups 2ch, 2ch + 1
    r.d = load_u16(p + 208);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int, uint32_t w[2], float s[2], float m[2],
                            const uint32_t*) {
    const int k = ch % 4;
    const float d = half_bits_to_float(r.d);
    for (int i = 0; i < 2; ++i) {
      w[i] = ((join_halves(r.ql[i]) >> (4 * (k / 2))) & 0x0F0F0F0F) |
             (((join_halves(r.qh[i]) >> (2 * k)) & 0x03030303) << 4);
      const int8_t sc = static_cast<int8_t>(byte_of_word<2>(r.sc, 192 + 2 * ch + i));
      s[i] = d * (small_uint_to_float(static_cast<uint32_t>(sc + 128)) - 128.0f);
      m[i] = 0.f;
    }
  }
};

struct FmtQ3_K : SplitChunk<FmtQ3_K> {
  static constexpr int BE = 256, BB = 110, ALIGN = 2, GROUPS = 2, OFF = 4;
  static constexpr CodeKind CODE = U7;  // q2 + 4 * hbit
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  // sc_low, sc_high: the half-words of the 6-bit scales' low nibbles and high bit pairs
  struct Raw { uint32_t q2[2][2], hb[2][2], sc_low, sc_high, d; };
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    const int h = ch / 4;
    for (int i = 0; i < 2; ++i) {
      const int j = 16 * i + 4 * t;
      load_halves(p + 32 + 32 * h + j, r.q2[i]);
      load_halves(p + j, r.hb[i]);
    }
    r.sc_low = header_word<2>(p, 96 + (2 * ch) % 8);  // groups 2ch and 2ch + 1 share these
    r.sc_high = header_word<2>(p, 104 + (2 * ch) % 4);
    r.d = load_u16(p + 108);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int, uint32_t w[2], float s[2], float m[2],
                            const uint32_t*) {
    const int k = ch % 4;
    const float d = half_bits_to_float(r.d);
    for (int i = 0; i < 2; ++i) {
      const uint32_t q2 = (join_halves(r.q2[i]) >> (2 * k)) & 0x03030303;
      const uint32_t hb = (join_halves(r.hb[i]) >> ch) & 0x01010101;
      w[i] = q2 | (hb << 2);
      const int g = 2 * ch + i;  // the 16-value group: its 6-bit scale
      const uint32_t low = (byte_of_word<2>(r.sc_low, 96 + g % 8) >> (4 * (g / 8))) & 15;
      const uint32_t high = (byte_of_word<2>(r.sc_high, 104 + g % 4) >> (2 * (g / 4))) & 3;
      s[i] = d * (small_uint_to_float(low | (high << 4)) - 32.0f);
      m[i] = 0.f;
    }
  }
};

struct FmtQ2_K : SplitChunk<FmtQ2_K> {
  static constexpr int BE = 256, BB = 84, ALIGN = 4, GROUPS = 2, OFF = 0;
  static constexpr CodeKind CODE = U7;
  static constexpr bool HAS_MIN = true;
  static constexpr int TABLE_WORDS = 0;
  GQ_DEV static const uint32_t* global_table() { return nullptr; }
  struct Raw { uint32_t q[2], sc, dd; };  // sc: the scale bytes of groups 2ch, 2ch + 1; dd: d, dmin
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    const int h = ch / 4;
    for (int i = 0; i < 2; ++i) r.q[i] = load_u32(p + 16 + 32 * h + 16 * i + 4 * t);
    r.sc = header_word<4>(p, 2 * ch);
    r.dd = load_u32(p + 80);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int, uint32_t w[2], float s[2], float m[2],
                            const uint32_t*) {
    const int k = ch % 4;
    const float d = half_of_word<4>(r.dd, 80), dmin = half_of_word<4>(r.dd, 82);
    for (int i = 0; i < 2; ++i) {
      w[i] = (r.q[i] >> (2 * k)) & 0x03030303;
      const uint32_t sb = byte_of_word<4>(r.sc, 2 * ch + i);
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

struct FmtIQ2_XS : SplitChunk<FmtIQ2_XS> {
  static constexpr int BE = 256, BB = 74, ALIGN = 2, GROUPS = 2, OFF = 0;
  static constexpr CodeKind CODE = S6;  // +-{8, 25, 43}
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 1024 + 32;  // the grid, two words a row; the sign bytes
  GQ_DEV static const uint32_t* global_table() { return kIQ2XSTable; }
  struct Raw { uint32_t idx[2], ls, d; };  // idx: grid row (9 bits) and sign index per group of 8
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    for (int i = 0; i < 2; ++i) {
      const int g8 = 4 * ch + 2 * i + t / 2;  // the group of 8 holding values 16i + 4t .. + 3
      r.idx[i] = load_u16(p + 2 + 2 * g8);
    }
    r.ls = header_word<2>(p, 66 + ch);  // low nibble: group 2ch, high: 2ch + 1
    r.d = load_u16(p);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int t, uint32_t w[2], float s[2], float m[2],
                            const uint32_t* tab) {
    const float d = half_bits_to_float(r.d);
    const uint32_t ls = byte_of_word<2>(r.ls, 66 + ch);
    for (int i = 0; i < 2; ++i) {
      const uint32_t grid = tab[2 * (r.idx[i] & 511) + t % 2];
      const uint32_t signs = reinterpret_cast<const uint8_t*>(tab + 1024)[r.idx[i] >> 9];
      const uint32_t neg = (signs >> (4 * (t % 2))) & 15;
      w[i] = apply_signs4(grid, neg);
      s[i] = (d * (small_uint_to_float((ls >> (4 * i)) & 15) + 0.5f)) * 0.25f;
      m[i] = 0.f;
    }
  }
};

struct FmtIQ3_S : SplitChunk<FmtIQ3_S> {
  static constexpr int BE = 256, BB = 110, ALIGN = 2, GROUPS = 1, OFF = 0;
  static constexpr CodeKind CODE = S6;  // +-{1, 3, .., 15}
  static constexpr bool HAS_MIN = false;
  static constexpr int TABLE_WORDS = 512;  // the grid
  GQ_DEV static const uint32_t* global_table() { return kIQ3SGrid; }
  // idx: the grid rows' low 8 bits; qh: their 9th bits; neg: the sign bytes; ls: the scale nibble
  struct Raw { uint32_t idx[2], neg[2], qh, ls, d; };
  GQ_DEV static void load(const uint8_t* p, int ch, int t, Raw& r) {
    for (int i = 0; i < 2; ++i) {
      r.idx[i] = load_u8(p + 2 + 8 * ch + 4 * i + t);  // the group of 4 values 16i + 4t .. + 3
      r.neg[i] = load_u8(p + 74 + 4 * ch + 2 * i + t / 2);
    }
    r.qh = header_word<2>(p, 66 + ch);  // bit g % 8: bit 8 of group g's index
    r.ls = header_word<2>(p, 106 + ch / 2);
    r.d = load_u16(p);
  }
  GQ_DEV static void decode(const Raw& r, int ch, int t, uint32_t w[2], float s[1], float m[1],
                            const uint32_t* tab) {
    const uint32_t qh = byte_of_word<2>(r.qh, 66 + ch);
    for (int i = 0; i < 2; ++i) {
      const uint32_t idx = r.idx[i] | (((qh >> (4 * i + t)) & 1) << 8);
      const uint32_t neg = (r.neg[i] >> (4 * (t % 2))) & 15;
      w[i] = apply_signs4(tab[idx], neg);
    }
    const uint32_t ls = (byte_of_word<2>(r.ls, 106 + ch / 2) >> (4 * (ch % 2))) & 15;
    s[0] = half_bits_to_float(r.d) * small_uint_to_float(1 + 2 * ls);
    m[0] = 0.f;
  }
};

}  // namespace GPUQ_TARGET
}  // namespace gpuq
