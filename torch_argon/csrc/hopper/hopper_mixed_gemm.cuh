// The experts' GEMM on Hopper (sm_90a) with GGUF weights that are never decoded to memory: the
// mainloop loads their codes (4 or 8 bits) and per-group scales and zeros by TMA and converts
// them to bf16 in registers before each wgmma (CUTLASS 4.2's sm90 mixed-input collective, with
// our conversion: hopper_mixed_convert.cuh), over the padded plan's tiles like the dense padded
// GEMM (hopper_padded_gemm.cuh). Every format of 32-value affine groups takes it once repacked
// (torch_argon/quant/mixed_repack.py: w = s * u + z per group, u unsigned).
//
// Algorithm. CUTLASS's mixed-input mainloop converts its A operand (the narrow one must be K-major
// and, in registers, feeds wgmma's A: RS wgmma), so the problem is transposed: D^T = W @ X^T,
// batched over L = n_experts. M = the weight's rows n, N = the plan's rows, K = k. A = the codes
// (uint4 or uint8) in 16 x 16 blocks, each consumer thread's 8 codes of a K block adjacent
// (hopper_mixed_convert.cuh CodesAtom, tiled m-block fastest, then k-block, then expert; the
// mainloop's shared-memory tile takes the same order, unswizzled), B = the gathered activations x
// [rows, k] with a static stride-0 L mode (TMA ignores the expert), D = d [rows, n] seen as an
// (M, N) tensor of strides (1, n, 0) (the epilogue's TMA store writes the row-major output). The
// scheduler is the padded plan's (hopper_padded_scheduler.cuh) with the plan's tiles along N
// (tag PaddedTilesTokensAlongN): output tile (m, n) of a used plan tile n has L = tile_expert[n].
// Per K tile of 64 the producer loads the 128 x 64 codes of A (4 K blocks of 8 contiguous
// 16 x 16 blocks), the t x 64 bf16 of B and the
// 128 scale and 128 zero pairs (uint32: both groups of the tile, from [n_experts, k / 64, n]);
// each consumer warpgroup (cooperative: two, 64 rows of M each) loads a thread's 8 codes of a
// K block with one 32-bit (4-bit codes) or 64-bit (8-bit) shared-memory load, converts them
// into the bf16 A fragment and issues the RS wgmma; the epilogue rounds the
// fp32 accumulators to bf16 once.
//
// Launch shape. min(sm_count, ceil(n / 128) * max_tiles_m) CTAs of 384 threads (one producer
// warpgroup, two consumer warpgroups), persistent, tile 128 x t x 64 with t the plan's tile_m
// (128, or 64 where experts hold few rows: a 64-token tile halves the wgmma work spent on
// padding rows, while each K tile's conversion, the same 128 x 64 codes, is then amortized over
// half the tokens), cluster 1 x 1, the stages the shared memory allows after the epilogue's
// (StageCountAutoCarveout).
//
// Limits. k a multiple of 64 (the K tile), n a multiple of 16 (the codes' blocks; the
// output's 16-byte rows), all pointers 16-byte aligned (the glue's checks),
// rows = t * max_tiles_m.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "hopper/hopper_cutlass_launch.cuh"
#include "hopper/hopper_mixed_convert.cuh"
#include "hopper/hopper_mixed_gemm.h"
#include "hopper/hopper_padded_gemm.h"
#include "hopper/hopper_padded_order.h"
#include "hopper/hopper_padded_scheduler.cuh"

namespace argon_hopper_mixed {

using cute::Int;
using cute::Shape;

// What both code widths share: shapes, strides, the epilogue, per token tile (the plan's tile_m:
// 128, or 64 where experts hold few rows and half of a 128-row tile would be padding). Kept out of
// the template below (its codes' element is used by the mainloop alone): gcc, nvcc's host
// compiler, fails to parse CUTLASS's epilogue builder named from inside a class template that
// does not use its parameter there.
template <int TokenTile>
struct MixedCommon {
  static_assert(TokenTile == 64 || TokenTile == 128, "the plan's tile_m: 64 or 128");
  static constexpr int kTokenTile = TokenTile;
  using Element = cutlass::bfloat16_t;
  using Pair = uint32_t;  // two bf16 groups (hopper_mixed_convert.cuh)
  using TileShape = Shape<Int<128>, Int<TokenTile>, Int<64>>;  // M, N (plan), K
  using ClusterShape = Shape<Int<1>, Int<1>, Int<1>>;
  using ProblemShape = Shape<int, int, int, int>;
  // codes (n, k, expert) in 16 x 16 blocks, each thread's 8 values of a K block contiguous
  // (hopper_mixed_convert.cuh: CodesAtom); a layout, not a stride: CUTLASS's mainloop takes its
  // shared-memory layout from it (detail::get_smem_layout) and loads a thread's codes at once
  using LayoutA = decltype(cute::tile_to_shape(CodesAtom{}, Shape<int, int, int>{}));
  using StrideB = cute::Stride<int64_t, Int<1>, Int<0>>;   // x (row, k, -)
  using StrideD = cute::Stride<Int<1>, int64_t, Int<0>>;   // d^T (n, row, -)
  static constexpr int kAlignB = 8;
  static constexpr int kAlignD = 8;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, StrideD, kAlignD,
      Element, StrideD, kAlignD, cutlass::epilogue::TmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;
  static constexpr int kEpilogueSmem = static_cast<int>(sizeof(typename Epilogue::SharedStorage));
};

// The layout's premise (as the padded GEMM's): B's and D's tensor maps ignore the expert.
template <class Tma>
using LStride = cute::tuple_element_t<2, typename Tma::AuxParams::GmemStrides>;

// The kernel for codes of element Narrow (cutlass::uint4b_t or uint8_t) and a token tile.
template <class NarrowElement, int TokenTile>
struct MixedGemm : MixedCommon<TokenTile> {
  using Common = MixedCommon<TokenTile>;
  using Narrow = NarrowElement;
  using Element = typename Common::Element;
  using Pair = typename Common::Pair;
  using TileShape = typename Common::TileShape;
  using StrideB = typename Common::StrideB;
  using StrideD = typename Common::StrideD;
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<Narrow>::value;  // 16 bytes of codes
  using CollectiveEpilogue = typename Common::Epilogue;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<Narrow, Pair, Pair>,
      typename Common::LayoutA, kAlignA, Element, StrideB, Common::kAlignB, float, TileShape,
      typename Common::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<Common::kEpilogueSmem>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

  // The collective converts with our specialization, not CUTLASS's general one.
  static_assert(
      cutlass::gemm::collective::detail::MixedInputUtils<CollectiveMainloop>::kArgonGroups,
      "the group conversion specialization must match the built collective");
  static_assert(CollectiveMainloop::KernelConversionMode ==
                    cutlass::detail::ConversionMode::ConvertAndScaleWithZero,
                "scales and zeros");
  static_assert(cute::is_constant<0, LStride<typename CollectiveMainloop::Params::TMA_B>>::value,
                "x's tensor map must ignore the expert (L) coordinate");
  static_assert(cute::is_constant<0, LStride<typename CollectiveEpilogue::Params::TMA_D>>::value,
                "d's tensor map must ignore the expert (L) coordinate");

  using Kernel = cutlass::gemm::kernel::GemmUniversal<typename Common::ProblemShape,
                                                      CollectiveMainloop, CollectiveEpilogue,
                                                      argon_hopper_padded::PaddedTilesTokensAlongN>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

constexpr const char* kKernel = "hopper mixed-input GEMM";

template <class G>
int run(const ArgonHopperMixedGemm& p, char* err, int err_len) {
  using Mainloop = typename G::CollectiveMainloop;
  using StrideScale = typename Mainloop::StrideScale;
  if (p.tile_rows != G::kTokenTile)
    return argon_hopper_launch::fail(err, err_len, kKernel, "the unit's token tile is not the plan's",
                                     "");
  const int rows = p.max_tiles_m * G::kTokenTile;
  const int64_t k = p.k, n = p.n;
  cutlass::KernelHardwareInfo hw{};
  cudaGetDevice(&hw.device_id);
  hw.sm_count = p.sm_count;

  typename Mainloop::Arguments mainloop{};
  mainloop.ptr_A = static_cast<const typename G::Narrow*>(p.codes);
  mainloop.dA = cute::tile_to_shape(CodesAtom{}, cute::make_shape(p.n, p.k, p.n_experts));
  mainloop.ptr_B = static_cast<const typename G::Element*>(p.x);
  mainloop.dB = typename G::StrideB{k, Int<1>{}, Int<0>{}};
  mainloop.ptr_S = static_cast<const typename G::Pair*>(p.scales);
  mainloop.dS = StrideScale{Int<1>{}, n, n * (k / 64)};
  mainloop.group_size = 64;  // one pair per K tile (hopper_mixed_convert.cuh)
  mainloop.ptr_Z = static_cast<const typename G::Pair*>(p.zeros);

  typename G::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kBatched,
      {p.n, rows, p.k, p.n_experts},
      mainloop,
      {{}, nullptr, typename G::StrideD{Int<1>{}, n, Int<0>{}}, static_cast<typename G::Element*>(p.d),
       typename G::StrideD{Int<1>{}, n, Int<0>{}}},
      hw,
      {}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.scheduler.tile_expert = p.tile_expert;
  args.scheduler.used_tiles = p.used_tiles;
  args.scheduler.order_window = argon_hopper_padded::order_window(p.max_tiles_m, p.n_experts);

  if (G::Gemm::get_workspace_size(args) != 0)
    return argon_hopper_launch::fail(err, err_len, kKernel, "CUTLASS asked for a workspace", "");
  return argon_hopper_launch::launch<typename G::Gemm>(
      args, nullptr, static_cast<cudaStream_t>(p.stream), kKernel, err, err_len);
}

}  // namespace argon_hopper_mixed
