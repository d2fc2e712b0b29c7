// The GGUF block formats, written once for every kernel that dequantizes: the Metal kernels
// (dequantize.metal, moe_qmm.metal), the same files run on host threads (metal_host) or by nvcc
// (metal_cuda), and the CPU kernels (csrc/cpu/), which include it as plain C++. It keeps to the
// common subset of portable.h: ARGON_DEVICE / ARGON_THREAD for Metal's address spaces, the
// argon_u* integer types, argon_as_float for bit casts, no std::.
//
// Per format (quant_params.h lists them): a block struct of bytes (alignment 1, so sizeof is the
// block's size and a block may start at any byte: GGUF rows are not aligned), and
//   void dequant_<format>(ARGON_DEVICE const block_<format>* b, argon_u32 c, ARGON_THREAD float* v)
// which writes values 32c .. 32c+31 of the block (c < values per block / 32) to v[0..31].
//
// Bit-exact with torch_argon.quant.dequantize_reference (and gguf's numpy dequantize), so the
// formulas of docs/quantized-formats.md are followed to the letter:
// - every * and - is one float32 operation, in the parenthesised order; never fused (the C++
//   build has -ffp-contract=off, the Metal build -fno-fast-math and fp contract(off) below);
// - a sign is a multiply by +-1.0, which keeps a NaN's sign (times_sign);
// - an fp16 scale widens exactly, inf and NaN rebuilt from their bits (payload kept), so a NaN
//   or inf scale gives what the reference gives: NaN in, NaN out, inf times a quant;
// - `a - b` keeps a's NaN when both are NaN (what the CPU's subtract does, and the reference).
// Multi-byte fields are little-endian and unaligned: read byte by byte.
#pragma once
#include "shared/portable.h"
#include "shared/quant_params.h"
#include "shared/quant_tables.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

namespace argon_quant {

// ---- fields --------------------------------------------------------------------------------

ARGON_FN argon_u32 u16_at(ARGON_DEVICE const argon_u8* p) {
  return argon_u32(p[0]) | (argon_u32(p[1]) << 8);
}

ARGON_FN argon_u32 u32_at(ARGON_DEVICE const argon_u8* p) {
  return argon_u32(p[0]) | (argon_u32(p[1]) << 8) | (argon_u32(p[2]) << 16) |
         (argon_u32(p[3]) << 24);
}

// An fp16 field as float32, exactly, from its bits (no half arithmetic: x86's baseline has no
// half conversion instruction, and a library call per scale costs more than the block's math):
// inf / NaN keep sign and payload (payload << 13, as numpy widens them), normals get their
// exponent rebiased (15 -> 127), subnormals are mantissa * 2^-24 (both factors exact).
ARGON_FN float f16_at(ARGON_DEVICE const argon_u8* p) {
  const argon_u32 h = u16_at(p);
  const argon_u32 sign = (h & 0x8000u) << 16, magnitude = h & 0x7FFFu;
  if (magnitude >= 0x7C00u) return argon_as_float(sign | 0x7F800000u | ((h & 0x3FFu) << 13));
  if (magnitude >= 0x0400u) return argon_as_float(sign | ((magnitude + 0x1C000u) << 13));
  return argon_as_float(sign | argon_as_u32(float(magnitude) * 5.9604644775390625e-8f));
}

// x * -1.0 where `negative`, x * 1.0 otherwise: the sign bit flipped except on a NaN. Written
// out because compilers rewrite a multiply by -1 as a negation, which flips a NaN's sign bit,
// where the multiply (the reference) keeps it; as a bit flip it also vectorises.
ARGON_FN float times_sign(float x, argon_u32 negative) {
  return argon_as_float(argon_as_u32(x) ^ (negative != 0 && x == x ? 0x80000000u : 0u));
}

// A byte read as a two's complement int8 (not through `char`, whose signedness C++ leaves open).
ARGON_FN int i8(argon_u8 x) { return int(x) - int(argon_u32(x & 0x80u) << 1); }

// ---- 32-value blocks -----------------------------------------------------------------------

struct block_q8_0 { argon_u8 d[2]; argon_u8 qs[32]; };
struct block_q4_0 { argon_u8 d[2]; argon_u8 qs[16]; };
struct block_q5_0 { argon_u8 d[2]; argon_u8 qh[4]; argon_u8 qs[16]; };
struct block_iq4_nl { argon_u8 d[2]; argon_u8 qs[16]; };
struct block_mxfp4 { argon_u8 e; argon_u8 qs[16]; };

// x[i] = qs[i] * d
ARGON_FN void dequant_q8_0(ARGON_DEVICE const block_q8_0* b, argon_u32 c, ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  for (argon_u32 j = 0; j < 32; ++j) v[j] = float(i8(b->qs[j])) * d;
}

// x[i] = d * (q - 8)
ARGON_FN void dequant_q4_0(ARGON_DEVICE const block_q4_0* b, argon_u32 c, ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  for (argon_u32 j = 0; j < 16; ++j) {
    v[j] = d * float(int(b->qs[j] & 15u) - 8);
    v[j + 16] = d * float(int(b->qs[j] >> 4) - 8);
  }
}

// x[i] = d * ((q | bit i of qh << 4) - 16)
ARGON_FN void dequant_q5_0(ARGON_DEVICE const block_q5_0* b, argon_u32 c, ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  const argon_u32 qh = u32_at(b->qh);
  for (argon_u32 j = 0; j < 16; ++j) {
    const argon_u32 lo = (b->qs[j] & 15u) | (((qh >> j) & 1u) << 4);
    const argon_u32 hi = (b->qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
    v[j] = d * float(int(lo) - 16);
    v[j + 16] = d * float(int(hi) - 16);
  }
}

// x[i] = d * IQ4_NL_VALUES[q]
ARGON_FN void dequant_iq4_nl(ARGON_DEVICE const block_iq4_nl* b, argon_u32 c,
                             ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  for (argon_u32 j = 0; j < 16; ++j) {
    v[j] = d * IQ4_NL_VALUES[b->qs[j] & 15u];
    v[j + 16] = d * IQ4_NL_VALUES[b->qs[j] >> 4];
  }
}

// x[i] = 2^(e-128) * MXFP4_VALUES_X2[q]; the power of two built exactly from bits (subnormal
// for e < 2; e = 255 is 2^127, as ggml decodes it).
ARGON_FN void dequant_mxfp4(ARGON_DEVICE const block_mxfp4* b, argon_u32 c, ARGON_THREAD float* v) {
  const argon_u32 e = b->e;
  const float d = argon_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  for (argon_u32 j = 0; j < 16; ++j) {
    v[j] = d * MXFP4_VALUES_X2[b->qs[j] & 15u];
    v[j + 16] = d * MXFP4_VALUES_X2[b->qs[j] >> 4];
  }
}

// ---- 256-value super-blocks (chunk c = sub-block of 32 values) -----------------------------

struct block_iq4_xs {
  argon_u8 d[2]; argon_u8 scales_h[2]; argon_u8 scales_l[4]; argon_u8 qs[128];
};
struct block_q4_k { argon_u8 d[2]; argon_u8 dmin[2]; argon_u8 scales[12]; argon_u8 qs[128]; };
struct block_q5_k {
  argon_u8 d[2]; argon_u8 dmin[2]; argon_u8 scales[12]; argon_u8 qh[32]; argon_u8 qs[128];
};
struct block_q6_k { argon_u8 ql[128]; argon_u8 qh[64]; argon_u8 scales[16]; argon_u8 d[2]; };
struct block_iq2_xs { argon_u8 d[2]; argon_u8 qs[64]; argon_u8 scales[8]; };
struct block_q3_k { argon_u8 hmask[32]; argon_u8 qs[64]; argon_u8 scales[12]; argon_u8 d[2]; };
struct block_iq3_s {
  argon_u8 d[2]; argon_u8 qs[64]; argon_u8 qh[8]; argon_u8 signs[32]; argon_u8 scales[4];
};
struct block_q2_k { argon_u8 scales[16]; argon_u8 qs[64]; argon_u8 d[2]; argon_u8 dmin[2]; };

// x = (d * (ls - 32)) * IQ4_NL_VALUES[q], 6-bit ls from a nibble of scales_l and 2 bits of
// scales_h; q: low nibbles of the sub-block's 16 bytes, then high nibbles.
ARGON_FN void dequant_iq4_xs(ARGON_DEVICE const block_iq4_xs* b, argon_u32 c,
                             ARGON_THREAD float* v) {
  const argon_u32 ls = ((b->scales_l[c / 2] >> (4 * (c % 2))) & 15u) |
                  (((u16_at(b->scales_h) >> (2 * c)) & 3u) << 4);
  const float dl = f16_at(b->d) * float(int(ls) - 32);
  ARGON_DEVICE const argon_u8* qs = b->qs + 16 * c;
  for (argon_u32 j = 0; j < 16; ++j) {
    v[j] = dl * IQ4_NL_VALUES[qs[j] & 15u];
    v[j + 16] = dl * IQ4_NL_VALUES[qs[j] >> 4];
  }
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block s from the 12 packed bytes.
ARGON_FN argon_u32 k_scale(ARGON_DEVICE const argon_u8* s, argon_u32 i) {
  return i < 4 ? s[i] & 63u : (s[i + 4] & 15u) | ((s[i - 4] >> 6) << 4);
}
ARGON_FN argon_u32 k_min(ARGON_DEVICE const argon_u8* s, argon_u32 i) {
  return i < 4 ? s[i + 4] & 63u : (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
}

// x = (d * sc) * q - (dmin * m); q: nibble c%2 of byte 32(c/2) + j.
ARGON_FN void dequant_q4_k(ARGON_DEVICE const block_q4_k* b, argon_u32 c, ARGON_THREAD float* v) {
  const float dl = f16_at(b->d) * float(k_scale(b->scales, c));
  const float ml = f16_at(b->dmin) * float(k_min(b->scales, c));
  ARGON_DEVICE const argon_u8* qs = b->qs + 32 * (c / 2);
  const argon_u32 shift = 4 * (c % 2);
  for (argon_u32 j = 0; j < 32; ++j) v[j] = dl * float((qs[j] >> shift) & 15u) - ml;
}

// As Q4_K with a fifth bit: bit c of qh[j].
ARGON_FN void dequant_q5_k(ARGON_DEVICE const block_q5_k* b, argon_u32 c, ARGON_THREAD float* v) {
  const float dl = f16_at(b->d) * float(k_scale(b->scales, c));
  const float ml = f16_at(b->dmin) * float(k_min(b->scales, c));
  ARGON_DEVICE const argon_u8* qs = b->qs + 32 * (c / 2);
  const argon_u32 shift = 4 * (c % 2);
  for (argon_u32 j = 0; j < 32; ++j) {
    const argon_u32 q = ((qs[j] >> shift) & 15u) | (((b->qh[j] >> c) & 1u) << 4);
    v[j] = dl * float(q) - ml;
  }
}

// x = (d * scales[i/16]) * (q - 32), q 6-bit: with h = c/4, k = c%4, 4 bits of
// ql[64h + 32(k%2) + j] (nibble k/2) and 2 bits of qh[32h + j] (bits 2k).
ARGON_FN void dequant_q6_k(ARGON_DEVICE const block_q6_k* b, argon_u32 c, ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  const argon_u32 h = c / 4, k = c % 4;
  ARGON_DEVICE const argon_u8* ql = b->ql + 64 * h + 32 * (k % 2);
  ARGON_DEVICE const argon_u8* qh = b->qh + 32 * h;
  for (argon_u32 half_ = 0; half_ < 2; ++half_) {
    const float dl = d * float(i8(b->scales[2 * c + half_]));
    for (argon_u32 j = 16 * half_; j < 16 * half_ + 16; ++j) {
      const argon_u32 q = ((ql[j] >> (4 * (k / 2))) & 15u) | (((qh[j] >> (2 * k)) & 3u) << 4);
      v[j] = dl * float(int(q) - 32);
    }
  }
}

// x = (d * (u[i/16] - 32)) * q, q = 2 bits of qs[32h + j] (bits 2k) minus 4 unless bit c of
// hmask[j] is set; u: 6-bit scales, 4 bits from scales[t%8] and 2 from scales[8 + t%4].
ARGON_FN void dequant_q3_k(ARGON_DEVICE const block_q3_k* b, argon_u32 c, ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  const argon_u32 h = c / 4, k = c % 4;
  ARGON_DEVICE const argon_u8* qs = b->qs + 32 * h;
  for (argon_u32 half_ = 0; half_ < 2; ++half_) {
    const argon_u32 t = 2 * c + half_;
    const argon_u32 u = ((b->scales[t % 8] >> (4 * (t / 8))) & 15u) |
                   (((b->scales[8 + t % 4] >> (2 * (t / 4))) & 3u) << 4);
    const float dl = d * float(int(u) - 32);
    for (argon_u32 j = 16 * half_; j < 16 * half_ + 16; ++j) {
      const int q = int((qs[j] >> (2 * k)) & 3u) - (((b->hmask[j] >> c) & 1u) ? 0 : 4);
      v[j] = dl * float(q);
    }
  }
}

// x = (d * (sb & 15)) * q - (dmin * (sb >> 4)), sb = scales[i/16], q = 2 bits of qs[32h + j].
ARGON_FN void dequant_q2_k(ARGON_DEVICE const block_q2_k* b, argon_u32 c, ARGON_THREAD float* v) {
  const float d = f16_at(b->d), dmin = f16_at(b->dmin);
  const argon_u32 h = c / 4, k = c % 4;
  ARGON_DEVICE const argon_u8* qs = b->qs + 32 * h;
  for (argon_u32 half_ = 0; half_ < 2; ++half_) {
    const argon_u32 sb = b->scales[2 * c + half_];
    const float dl = d * float(sb & 15u);
    const float ml = dmin * float(sb >> 4);
    for (argon_u32 j = 16 * half_; j < 16 * half_ + 16; ++j) {
      v[j] = dl * float((qs[j] >> (2 * k)) & 3u) - ml;
    }
  }
}

// x = ((d * (ls + 0.5)) * 0.25 * G) * sign for 8-value group g (u16 word w = qs[g]): G = byte
// k of IQ2XS_GRID[w & 511], sign from bit k of IQ2XS_SIGNS[w >> 9]; ls: nibble of scales[c],
// one per 16 values.
ARGON_FN void dequant_iq2_xs(ARGON_DEVICE const block_iq2_xs* b, argon_u32 c,
                             ARGON_THREAD float* v) {
  const float d = f16_at(b->d);
  for (argon_u32 g4 = 0; g4 < 4; ++g4) {
    const argon_u32 w = u16_at(b->qs + 2 * (4 * c + g4));
    const argon_u32 ls = (b->scales[c] >> (4 * (g4 / 2))) & 15u;
    const float db = (d * (float(ls) + 0.5f)) * 0.25f;
    const argon_u64 grid = IQ2XS_GRID[w & 511u];
    const argon_u32 signs = IQ2XS_SIGNS[w >> 9];
    // 32-bit shifts vectorise
    const argon_u32 grid_lo = argon_u32(grid), grid_hi = argon_u32(grid >> 32);
    for (argon_u32 k = 0; k < 4; ++k) {
      v[8 * g4 + k] = times_sign(db * float((grid_lo >> (8 * k)) & 255u), (signs >> k) & 1u);
      v[8 * g4 + 4 + k] =
          times_sign(db * float((grid_hi >> (8 * k)) & 255u), (signs >> (4 + k)) & 1u);
    }
  }
}

// x = ((d * (1 + 2 ls)) * G) * sign for 4-value group g: G = byte i%4 of IQ3S_GRID[qs[g] | bit
// g%8 of qh[g/8] << 8], sign bit i%8 of signs[i/8]; ls: nibble c%2 of scales[c/2].
ARGON_FN void dequant_iq3_s(ARGON_DEVICE const block_iq3_s* b, argon_u32 c, ARGON_THREAD float* v) {
  const argon_u32 ls = (b->scales[c / 2] >> (4 * (c % 2))) & 15u;
  const float db = f16_at(b->d) * float(1u + 2u * ls);
  for (argon_u32 g8 = 0; g8 < 8; ++g8) {
    const argon_u32 g = 8 * c + g8;
    const argon_u32 grid = IQ3S_GRID[b->qs[g] | (((b->qh[g / 8] >> (g % 8)) & 1u) << 8)];
    const argon_u32 signs = b->signs[g / 2];
    for (argon_u32 k = 0; k < 4; ++k) {
      // i: the index in the chunk; its sign is bit (4g + k) % 8 of signs[(4g + k) / 8]
      const argon_u32 i = 4 * g8 + k;
      v[i] = times_sign(db * float((grid >> (8 * k)) & 255u), (signs >> (4 * (g % 2) + k)) & 1u);
    }
  }
}

}  // namespace argon_quant
