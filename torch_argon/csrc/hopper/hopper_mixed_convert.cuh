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
// The arithmetic, per value: w = bf16(fma(float(u), s, z)), s and z the bf16 halves widened
// (exact). u * s is exact in float32 (8 x 8 significant bits at most), so the fma rounds once,
// in the add, then once to bf16 (cvt.rn): quant/mixed_repack.mixed_dequantize computes the
// same bits.
//
// Limits. TileK 64 (two groups a tile: checked below); the codes unsigned, 4 or 8 bits.
// Not tuned: the loop converts one value at a time (code extract, LOP3 + FADD for the code,
// FFMA, half an F2FP pack per value); CUTLASS's lookup / prmt conversions for int4 and a
// reordered code layout are the next step (bench/quant_mixed_notes.md).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
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

// A code (0..255) as float, exactly, without a conversion instruction (I2F / I2FP issue at a
// fraction of the FMA pipe's rate): the float whose bits are 0x4B000000 | u is 2^23 + u.
CUTLASS_DEVICE float code_to_float(uint32_t u) {
  return __uint_as_float(0x4B000000u | u) - 8388608.0f;
}

// The code of one element of the codes' register fragment as an unsigned integer.
CUTLASS_DEVICE uint32_t code_bits(cutlass::uint4b_t u) { return static_cast<uint32_t>(u); }
CUTLASS_DEVICE uint32_t code_bits(uint8_t u) { return u; }

// The narrow element types the specialization below takes (the codes' widths).
template <class Narrow>
constexpr bool kIsCode =
    std::is_same_v<Narrow, cutlass::uint4b_t> || std::is_same_v<Narrow, uint8_t>;

// The bf16 in half `half` (0 low, 1 high) of a pair, widened to float (exact).
CUTLASS_DEVICE float pair_half(uint32_t pair, int half) {
  return __uint_as_float(half ? (pair & 0xFFFF0000u) : (pair << 16));
}

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
    using Dst = typename EngineOut::value_type;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(src); ++i) {
      const float u = argon_hopper_mixed::code_to_float(argon_hopper_mixed::code_bits(Narrow(src(i))));
      const float s = argon_hopper_mixed::pair_half(static_cast<uint32_t>(scales(i)), half);
      const float z = argon_hopper_mixed::pair_half(static_cast<uint32_t>(zeros(i)), half);
      dst(i) = Dst(__fmaf_rn(u, s, z));
    }
  }
};

}  // namespace cutlass::gemm::collective::detail
