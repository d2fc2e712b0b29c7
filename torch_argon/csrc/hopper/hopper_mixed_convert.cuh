// The in-register conversion of the mixed-input GEMM (hopper_mixed_gemm.cuh): unsigned 4- or
// 8-bit codes to bf16 with one scale and one zero per 32-value group, inside CUTLASS 4.2's sm90
// mixed-input mainloop (cutlass/gemm/collective/sm90_mma_tma_gmma_rs_warpspecialized_mixed_input.hpp).
// torch_argon/quant/mixed_repack.py writes every GGUF format of 32-value groups in this one
// form, w = s * u + z (Q4_K and Q4_0 as 4-bit codes; Q8_0, Q5_0, Q5_K, IQ4_NL and IQ4_XS as
// 8-bit ones, the table formats' codes being their table values plus 128).
//
// Why a specialization. That mainloop loads ONE scale (and zero) element per row of A and K tile
// (its SmemLayoutAtomScale is (TileM, 1), static_assert size<1> == 1, line 255; the producer
// loads scale column k_tile / reload_factor, line 710) and accepts group sizes that are a
// multiple of the K tile only (can_implement, line 484); its K tile is at least 64 for 16-bit
// MMAs (K_BLOCK_MAX = TileK / 16 >= 4, line 855). GGUF's groups are 32 values. So the weights'
// scale and zero elements are uint32: two bf16 bit patterns, group 2t in the low half and group
// 2t + 1 in the high half of K tile t (torch_argon/quant/mixed_repack.py lays them out), the
// mainloop is given group_size = 64 = the K tile, and it moves these 32-bit elements by TMA
// (its TMA element for scales is uint_bit_t<32>, line 204, and uint32_t is a TMA data type for
// the zeros too) and through shared memory to the consumer's registers untouched. Only the
// arithmetic must know the halves: CUTLASS's mainloop calls its conversion as
// detail::MixedInputUtils<Collective>::dequantize_A_kblock(..., k_block) (mixed_input_utils.hpp),
// so this file specializes MixedInputUtils for the collectives whose A is
// tuple<uint4b_t or uint8_t, uint32_t, uint32_t>: it inherits every other step (partitioning,
// copies, TMA byte counts) from the general template, instantiated on a view of the same
// collective, and replaces dequantize_A_kblock by one that picks the half from the K block:
// K block kb of a 64-wide tile (16 values each) lies in group 2t + kb / 2.
//
// The codes' order (CodesAtom below, the repack's): a thread's 8 codes of a K block are
// adjacent in shared memory, so one LDS.32 (4-bit) or LDS.64 (8-bit) brings them, in the order
// that pairs them for the conversion (positions j and j + 4 are the fragment's values 2j and
// 2j + 1: one row, k and k + 1, one scale and zero).
//
// The arithmetic, per pair of values:
//   4-bit codes: the nibbles j and j + 4 of the word, masked and OR-ed under bf16's exponent of
//     128 (LOP3: the bf16x2 (128 + q0, 128 + q1)), minus (128, 128) (exact), then one bf16x2
//     fma with (s, s) and (z, z): w = bf16(q * s + z) rounded once (fma.rn.bf16x2).
//   8-bit codes: each byte under float32's exponent of 2^23 (PRMT: 2^23 + u, minus 2^23 exact),
//     fma(u, s, z) in float32 (u * s exact: 8 x 8 significant bits, so rounded once, in the
//     add), the pair rounded to bf16x2 (one F2FP): w = bf16(float32(u * s + z)).
// quant/mixed_repack.mixed_dequantize computes the same bits for both widths.
//
// Limits. TileK 64 (two groups a tile: checked below); the codes unsigned, 4 or 8 bits, in
// CodesAtom's order (checked on the register fragment's layout at compile time).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cuda_bf16.h>
#include <cutlass/bfloat16.h>
#include <cutlass/detail/collective/mixed_input_utils.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/integer_subbyte.h>

namespace argon_hopper_mixed {

// What CUTLASS's MixedInputUtils reads of its collective (mixed_input_utils.hpp, the aliases at
// the top of the struct), forwarded from collective C: the general template instantiated on
// this view is the base of the specialization below (a different type, so no recursion).
template <class C>
struct UtilsView {
  using KernelSchedule = typename C::KernelSchedule;
  using SmemLayoutA = typename C::SmemLayoutA;
  using SmemLayoutB = typename C::SmemLayoutB;
  using SmemLayoutScale = typename C::SmemLayoutScale;
  using SwappedElementA = typename C::SwappedElementA;
  using SwappedElementB = typename C::SwappedElementB;
  using RealSwappedElementA = typename C::RealSwappedElementA;
  using RealSwappedElementB = typename C::RealSwappedElementB;
  using ElementScale = typename C::ElementScale;
  using ElementZero = typename C::ElementZero;
  using SmemCopyAtomScale = typename C::SmemCopyAtomScale;
  static constexpr auto KernelConversionMode = C::KernelConversionMode;
  static constexpr auto ModeHasScales = C::ModeHasScales;
  static constexpr auto UseScaleLookupTable = C::UseScaleLookupTable;
};

// The narrow element types the specialization below takes (the codes' widths).
template <class Narrow>
constexpr bool kIsCode =
    std::is_same_v<Narrow, cutlass::uint4b_t> || std::is_same_v<Narrow, uint8_t>;

// Whether a K block's 8 register values (layout L, logical value v -> position) are in the
// order CodesAtom stores them: v = v0 + 2 v1 + 4 v2 (v0: k + 1, v1: row + 8, v2: k + 8) at
// position 4 v0 + v1 + 2 v2, so that positions j and j + 4 hold the fragment's pair j.
template <class L>
constexpr bool in_pair_order() {
  for (int v = 0; v < 8; ++v)
    if (L{}(v) != 4 * (v % 2) + (v / 2) % 2 + 2 * (v / 4)) return false;
  return true;
}

// The bf16 of half `half` (0 low, 1 high) of a pair in both halves of a bf16x2.
CUTLASS_DEVICE uint32_t pair_half_x2(uint32_t pair, int half) {
  return __byte_perm(pair, 0, half ? 0x3232 : 0x1010);
}

// The bf16 in half `half` (0 low, 1 high) of a pair, widened to float (exact).
CUTLASS_DEVICE float pair_half(uint32_t pair, int half) {
  return __uint_as_float(half ? (pair & 0xFFFF0000u) : (pair << 16));
}

CUTLASS_DEVICE __nv_bfloat162 as_bf16x2(uint32_t bits) {
  return reinterpret_cast<const __nv_bfloat162&>(bits);
}
CUTLASS_DEVICE uint32_t bits_of(__nv_bfloat162 v) { return reinterpret_cast<const uint32_t&>(v); }

// Pair j (0..3) of a word of eight 4-bit codes in CodesAtom's order (nibbles j and j + 4) to
// bf16x2: each nibble q under the exponent of 128 (bf16 0x4300, one ulp = 1) is the bf16 128 + q
// (one LOP3), minus 128 is q exactly, then one bf16x2 fma: bf16(q * s + z) rounded once.
CUTLASS_DEVICE uint32_t convert_u4_pair(uint32_t codes, int j, uint32_t s2, uint32_t z2) {
  constexpr uint32_t k128 = 0x43004300u;  // bf16x2 (128, 128)
  uint32_t biased;
  // (a & b) | c in one LOP3 (the compiler splits it in two when both constants are immediates)
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(biased) : "r"(codes >> (4 * j)), "n"(0x000F000F),
      "n"(k128));
  const __nv_bfloat162 q = __hsub2(as_bf16x2(biased), as_bf16x2(k128));
  return bits_of(__hfma2(q, as_bf16x2(s2), as_bf16x2(z2)));
}

// A byte (0..255) as float, exactly, without a conversion instruction (I2F issues at a
// fraction of the FMA pipe's rate): the float of bits 0x4B000000 | u is 2^23 + u.
template <int Byte>
CUTLASS_DEVICE float byte_to_float(uint32_t word) {
  // one PRMT: bytes (word's Byte, 0, 0, 0x4B) with the selector an immediate and the exponent
  // in a register held across the loop (the other operand order puts 4 selectors in registers)
  uint32_t bits;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(bits) : "r"(0x4B000000u), "r"(word), "n"(0x3000 | (4 + Byte)));
  return __uint_as_float(bits) - 8388608.0f;
}

// Pair j of eight 8-bit codes in CodesAtom's order (byte j of the first word, byte j of the
// second): bf16(fma(u, s, z)) each, u * s exact in float32, so rounded in the add and to bf16.
template <int J>
CUTLASS_DEVICE uint32_t convert_u8_pair(uint32_t lo_word, uint32_t hi_word, float s, float z) {
  const float lo = __fmaf_rn(byte_to_float<J>(lo_word), s, z);
  const float hi = __fmaf_rn(byte_to_float<J>(hi_word), s, z);
  return bits_of(__floats2bfloat162_rn(lo, hi));  // lo in the low half
}

// The codes' order in memory: one 16 x 16 (row m, k) block of A, the part a warp holds of a
// 64 x 16 bf16 RS wgmma A fragment (rows 16 w .. 16 w + 15 for warp w of the warpgroup), as
// 256 consecutive values: lane 4 (m % 8) + (k % 8) / 2 owns values m, m + 8 x k, k + 1, k + 8,
// k + 9 and they are its 8 consecutive values (one 32-bit shared-memory load of 4-bit codes,
// one 64-bit of 8-bit ones), at position 4 (k % 2) + (m % 16) / 8 + 2 ((k % 16) / 8): the
// order [0, 2, 4, 6, 1, 3, 5, 7] of the fragment's values, so that the nibbles j and j + 4 of
// a lane's word are the fragment's pair j (values 2 j, 2 j + 1: one row, k and k + 1). The
// same function as CUTLASS's compute_memory_reordering_atom<bfloat16_t, Layout<_1,_1>,
// Layout<Shape<_2,_4>, Stride<_4,_1>>> (tools/util/include/cutlass/util/mixed_dtype_utils.hpp;
// tools/hopper_mixed_probe.cu checks it); the blocks are tiled over (m, k, expert) with m
// fastest (cute::tile_to_shape): torch_argon/quant/mixed_repack.py writes this order.
using CodesAtom = cute::Layout<cute::Shape<cute::Shape<cute::_8, cute::_2>,
                                           cute::Shape<cute::_2, cute::_4, cute::_2>>,
                               cute::Stride<cute::Stride<cute::_32, cute::_1>,
                                            cute::Stride<cute::_4, cute::_8, cute::_2>>>;

}  // namespace argon_hopper_mixed

namespace cutlass::gemm::collective::detail {

template <class Narrow, int Stages, class ClusterShape, class KernelSchedule, class TileShape, class StrideA,
          class ElementB, class StrideB, class TiledMma, class GmemTiledCopyA,
          class SmemLayoutAtomA, class SmemCopyAtomA, class TransformA, class GmemTiledCopyB,
          class SmemLayoutAtomB, class SmemCopyAtomB, class TransformB>
struct MixedInputUtils<CollectiveMma<
    MainloopSm90TmaGmmaRmemAWarpSpecializedMixedInput<Stages, ClusterShape, KernelSchedule>,
    TileShape, cute::tuple<Narrow, uint32_t, uint32_t>, StrideA, ElementB, StrideB,
    TiledMma, GmemTiledCopyA, SmemLayoutAtomA, SmemCopyAtomA, TransformA, GmemTiledCopyB,
    SmemLayoutAtomB, SmemCopyAtomB, TransformB>>
    : MixedInputUtils<argon_hopper_mixed::UtilsView<CollectiveMma<
          MainloopSm90TmaGmmaRmemAWarpSpecializedMixedInput<Stages, ClusterShape, KernelSchedule>,
          TileShape, cute::tuple<Narrow, uint32_t, uint32_t>, StrideA, ElementB,
          StrideB, TiledMma, GmemTiledCopyA, SmemLayoutAtomA, SmemCopyAtomA, TransformA,
          GmemTiledCopyB, SmemLayoutAtomB, SmemCopyAtomB, TransformB>>> {
  static constexpr bool kArgonGroups = true;  // the kernel checks that this specialization is used
  static constexpr int kGroup = 32;
  static_assert(argon_hopper_mixed::kIsCode<Narrow>, "codes are uint4b_t or uint8_t");
  static_assert(cute::size<2>(TileShape{}) == 2 * kGroup,
                "the conversion packs two 32-value groups per K tile of 64");

  // CUTLASS's signature (mixed_input_utils.hpp): the codes of K block k_block (registers,
  // tCrA_load), the bf16 A fragment the wgmma reads (tCrA_mma), the extra inputs as
  // partition_extra_mma_info made them: (smem scales, register scales, smem zeros, register
  // zeros), the registers filled at k_block 0 of each tile and shared by its K blocks.
  template <class EngineIn, class EngineOut, class LayoutIn, class LayoutOut, class... Ts>
  CUTLASS_DEVICE static void dequantize_A_kblock(cute::Tensor<EngineIn, LayoutIn> const& tCrA_load,
                                                 cute::Tensor<EngineOut, LayoutOut>& tCrA_mma,
                                                 cute::tuple<Ts...>& partitioned_extra_info,
                                                 int const k_block) {
    using cute::_;
    static_assert(cute::is_rmem<EngineIn>::value && cute::is_rmem<EngineOut>::value,
                  "the codes and the converted A live in registers");
    constexpr int kBlocks = decltype(cute::size<2>(tCrA_load))::value;  // K blocks a tile
    static_assert(kBlocks % 2 == 0, "a whole number of K blocks per group");
    auto src = tCrA_load(_, _, k_block);
    auto dst = tCrA_mma(_, _, k_block);
    auto scales = cute::get<1>(partitioned_extra_info)(_, _, k_block);
    auto zeros = cute::get<3>(partitioned_extra_info)(_, _, k_block);
    // one logical coordinate per value in all four: the loop below indexes them alike
    CUTE_STATIC_ASSERT_V(cute::shape(src) == cute::shape(dst));
    CUTE_STATIC_ASSERT_V(cute::shape(src) == cute::shape(scales));
    CUTE_STATIC_ASSERT_V(cute::shape(src) == cute::shape(zeros));
    const int half = k_block / (kBlocks / 2);  // group 2t + half of K tile t
    // the codes as CodesAtom put them (the register fragment copies the shared memory's order)
    static_assert(cute::size(decltype(src.layout()){}) == 8 &&
                      argon_hopper_mixed::in_pair_order<decltype(src.layout())>(),
                  "a K block's codes must arrive in CodesAtom's order (the repack's)");
    static_assert(cute::size(decltype(dst.layout()){}) == 8 &&
                      cute::cosize(decltype(dst.layout()){}) == 8 &&
                      decltype(dst.layout()){}(1) == 1 && decltype(dst.layout()){}(7) == 7,
                  "the bf16 fragment of a K block is 8 consecutive values");
    auto dst_words = cute::recast<uint32_t>(cute::make_tensor(dst.data(), cute::Layout<cute::_8>{}));
    auto code_words = cute::recast<uint32_t>(cute::make_tensor(src.data(), cute::Layout<cute::_8>{}));
    // pair j: values 2j, 2j + 1 (one row: one scale and zero)
    cute::for_each(cute::make_int_sequence<4>{}, [&](auto j) {
      const uint32_t s_pair = static_cast<uint32_t>(scales(2 * j));
      const uint32_t z_pair = static_cast<uint32_t>(zeros(2 * j));
      if constexpr (std::is_same_v<Narrow, cutlass::uint4b_t>) {
        dst_words(j) = argon_hopper_mixed::convert_u4_pair(
            code_words(0), j, argon_hopper_mixed::pair_half_x2(s_pair, half),
            argon_hopper_mixed::pair_half_x2(z_pair, half));
      } else {
        dst_words(j) = argon_hopper_mixed::convert_u8_pair<decltype(j)::value>(
            code_words(0), code_words(1), argon_hopper_mixed::pair_half(s_pair, half),
            argon_hopper_mixed::pair_half(z_pair, half));
      }
    });
  }
};

}  // namespace cutlass::gemm::collective::detail
