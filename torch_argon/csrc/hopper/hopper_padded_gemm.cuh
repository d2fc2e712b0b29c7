// The experts' GEMM on Hopper (sm_90a) over a padded plan (tile_m 128): one CUTLASS 3
// warp-specialized TMA kernel for the whole problem, its tiles walked by our scheduler
// (hopper_padded_scheduler.cuh); no per-expert tensor maps, pointers or problem shapes.
//
// Algorithm. CUTLASS's batched GEMM d_l = a_l @ b_l^T over L = n_experts batches, with the
// layouts chosen so that only B depends on the batch: A [rows, k] and D [rows, n] have an L mode
// of static stride 0 (CuTe's TMA construction drops a stride-0 mode from the tensor map: the L
// coordinate adds nothing to their TMA coordinates, cute/atom/copy_traits_sm90_tma.hpp), B is the
// weight stack [n_experts, n, k] with L stride n * k. So there is one tensor map per operand,
// built once on the host per launch, and the scheduler yields, for output tile (m, n) of a used
// M tile, L = tile_expert[m]: the producer warp's TMA loads take A rows [128 m, +128) and B rows
// [n * TileN, +TileN) of expert L, the consumer warpgroups multiply with wgmma into fp32
// registers (ping-pong: two warpgroups on alternate tiles, one's epilogue overlapping the other's
// mainloop; cooperative: both on one tile, split along M), and the epilogue rounds once to the
// output dtype and stores the tile through TMA at (128 m, n * TileN). The TMA bounds clip the
// last N tile (n not a multiple of TileN) and the K tail (zero-filled).
//
// Launch shape. min(sm_count, max_tiles_m * tiles_n) CTAs of 384 threads (one producer
// warpgroup, two consumer warpgroups), persistent; the shared memory the stage count allows
// (StageCountAutoCarveout). The used-tile count and tile_expert are read on the device.
//
// Limits. n and k multiples of 8 (16-byte TMA rows), a, b, d 16-byte aligned and rows = 128 *
// max_tiles_m (the glue checks them); clusters of 1 x 1 (the scheduler's header says why).
//
// The gate/up GEMM with the activation fused (PaddedActGemm, run_act): the same mainloop and
// scheduler, the same problem (n = 2I over the gate/up stack, its gate and up rows interleaved
// in blocks of 8), and in place of the TMA epilogue a register-to-global one
// (hopper_padded_act_epilogue.cuh) that writes h [rows, I] = act(gate) * up, bit for bit the
// unfused GEMM's gu followed by the swiglu op. Its units (hopper_padded_act_<dtype>_<config>.cu)
// are compiled with --fmad=false, as the swiglu kernel is. With no epilogue shared memory the
// mainloop gets the whole carveout for its stages.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "hopper/hopper_cutlass_launch.cuh"
#include "hopper/hopper_padded_act_epilogue.cuh"
#include "hopper/hopper_padded_gemm.h"
#include "hopper/hopper_padded_scheduler.cuh"

namespace argon_hopper_padded {

using cute::Int;
using cute::Shape;

// One compiled configuration: the CTA tile (M x N x K) and the two schedules.
template <int TileN, class Mainloop, class Epilogue>
struct Config {
  using TileShape = Shape<Int<ARGON_HOPPER_PADDED_TILE_M>, Int<TileN>, Int<64>>;
  using ClusterShape = Shape<Int<1>, Int<1>, Int<1>>;
  using MainloopSchedule = Mainloop;
  using EpilogueSchedule = Epilogue;
};

using Pingpong = Config<128, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                        cutlass::epilogue::TmaWarpSpecialized>;
using CooperativeWide = Config<256, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                               cutlass::epilogue::TmaWarpSpecializedCooperative>;

template <int I>
struct ConfigAt;  // hopper_padded_gemm.h's index i
template <>
struct ConfigAt<0> {
  using type = Pingpong;
};
template <>
struct ConfigAt<1> {
  using type = CooperativeWide;
};

// The layouts of the problem (M, N, K, L) = (rows, n, k, n_experts), as (M or N, K, L) modes:
// A and D row-major with a stride-0 L, B the experts' K-major weights.
using ProblemShape = Shape<int, int, int, int>;
using StrideA = cute::Stride<int64_t, Int<1>, Int<0>>;
using StrideB = cute::Stride<int64_t, Int<1>, int64_t>;
using StrideD = cute::Stride<int64_t, Int<1>, Int<0>>;
constexpr int kAlignment = 8;  // elements per 16 bytes

// The stride of a tensor map's L (expert) coordinate, in the types CuTe built.
template <class Tma>
using LStride = cute::tuple_element_t<2, typename Tma::AuxParams::GmemStrides>;

// The kernel of one element type, configuration and collective epilogue: the mainloop built
// with the stages that the epilogue's shared memory (EpilogueSmemBytes) leaves, our scheduler.
template <class Element, class Cfg, class Epilogue, int EpilogueSmemBytes>
struct PaddedKernel {
  using CollectiveEpilogue = Epilogue;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, StrideA, kAlignment, Element,
      StrideB, kAlignment, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<EpilogueSmemBytes>,
      typename Cfg::MainloopSchedule>::CollectiveOp;

  // The layout's premise: the TMA coordinate of A's L mode has the static stride 0 (the expert
  // does not move it), B's has not.
  static_assert(cute::is_constant<0, LStride<typename CollectiveMainloop::Params::TMA_A>>::value,
                "A's tensor map must ignore the expert (L) coordinate");
  static_assert(!cute::is_constant<0, LStride<typename CollectiveMainloop::Params::TMA_B>>::value,
                "B's tensor map must move with the expert (L) coordinate");

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop,
                                                      CollectiveEpilogue, PaddedTiles>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// The plain GEMM's epilogue: CUTLASS's TMA epilogue, alpha * acc rounded once to the output
// dtype (no C operand; alpha = 1).
template <class Element, class Cfg>
using TmaEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::TileShape,
    typename Cfg::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, StrideD, kAlignment, Element, StrideD, kAlignment, typename Cfg::EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;

template <class Element, class Cfg>
struct PaddedGemm
    : PaddedKernel<Element, Cfg, TmaEpilogue<Element, Cfg>,
                   static_cast<int>(sizeof(typename TmaEpilogue<Element, Cfg>::SharedStorage))> {
  static_assert(
      cute::is_constant<0, LStride<typename TmaEpilogue<Element, Cfg>::Params::TMA_D>>::value,
      "D's tensor map must ignore the expert (L) coordinate");
};

// The gate/up GEMM with the activation in its epilogue: GateUpActEpilogue in CUTLASS's adapter
// for register-to-global epilogues; no epilogue shared memory, so the stages take the whole
// carveout.
template <class Element>
using ActEpilogue =
    cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<GateUpActEpilogue<Element>>;

template <class Element, class Cfg>
struct PaddedActGemm
    : PaddedKernel<Element, Cfg, ActEpilogue<Element>,
                   static_cast<int>(sizeof(typename ActEpilogue<Element>::TensorStorage))> {};

constexpr const char* kKernel = "hopper padded GEMM";
constexpr const char* kActKernel = "hopper padded gate/up GEMM with the activation";

// Both kernels' launch: the problem, A and B from p, the epilogue's arguments as given, our
// scheduler's (read on the device: no host sync), no workspace.
template <class G>
int launch(const ArgonHopperPaddedGemm& p,
           const typename G::CollectiveEpilogue::Arguments& epilogue, const char* what, char* err,
           int err_len) {
  using Element = typename G::Gemm::ElementA;
  const int rows = p.max_tiles_m * ARGON_HOPPER_PADDED_TILE_M;
  const int64_t k = p.k, n = p.n;
  cutlass::KernelHardwareInfo hw{};
  cudaGetDevice(&hw.device_id);
  hw.sm_count = p.sm_count;
  typename G::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kBatched,
      {rows, p.n, p.k, p.n_experts},
      {static_cast<const Element*>(p.a), StrideA{k, Int<1>{}, Int<0>{}},
       static_cast<const Element*>(p.b), StrideB{k, Int<1>{}, n * k}},
      epilogue,
      hw,
      {}};
  args.scheduler.tile_expert = p.tile_expert;
  args.scheduler.used_tiles = p.used_tiles;
  args.scheduler.order_window = order_window(p.max_tiles_m, p.n_experts);

  // the scheduler and both epilogues keep nothing in global memory
  if (G::Gemm::get_workspace_size(args) != 0)
    return argon_hopper_launch::fail(err, err_len, what, "CUTLASS asked for a workspace", "");
  return argon_hopper_launch::launch<typename G::Gemm>(
      args, nullptr, static_cast<cudaStream_t>(p.stream), what, err, err_len);
}

template <class G>
int run(const ArgonHopperPaddedGemm& p, char* err, int err_len) {
  using Element = typename G::Gemm::ElementA;
  const int64_t n = p.n;
  typename G::CollectiveEpilogue::Arguments epilogue{
      {}, nullptr, StrideD{n, Int<1>{}, Int<0>{}}, static_cast<Element*>(p.d),
      StrideD{n, Int<1>{}, Int<0>{}}};
  epilogue.thread.alpha = 1.0f;
  epilogue.thread.beta = 0.0f;
  return launch<G>(p, epilogue, kKernel, err, err_len);
}

// The fused gate/up GEMM: p.b the interleaved gate/up stack [n_experts, n, k] (n = 2I), p.d
// h [rows, n / 2].
template <class G>
int run_act(const ArgonHopperPaddedGemm& p, char* err, int err_len) {
  typename G::CollectiveEpilogue::Arguments epilogue{};
  epilogue.ptr_h = static_cast<typename G::Gemm::ElementA*>(p.d);
  epilogue.ldh = p.n / 2;
  epilogue.n_h = p.n / 2;
  epilogue.activation = p.activation;
  return launch<G>(p, epilogue, kActKernel, err, err_len);
}

}  // namespace argon_hopper_padded

// One unit per element type and configuration (hopper_padded_<dtype>_<config>.cu) defines
// hopper_padded_units.h's function of its pair.
#define ARGON_HOPPER_PADDED_UNIT(suffix, Element, index)                                      \
  int argon_hopper_padded_run_##suffix##_##index(const ArgonHopperPaddedGemm& gemm, char* err, \
                                                 int err_len) {                                \
    return argon_hopper_padded::run<argon_hopper_padded::PaddedGemm<                          \
        Element, argon_hopper_padded::ConfigAt<index>::type>>(gemm, err, err_len);            \
  }

// The fused gate/up GEMM's units (hopper_padded_act_<dtype>_<config>.cu), likewise.
#define ARGON_HOPPER_PADDED_ACT_UNIT(suffix, Element, index)                                    \
  int argon_hopper_padded_act_run_##suffix##_##index(const ArgonHopperPaddedGemm& gemm,        \
                                                     char* err, int err_len) {                 \
    return argon_hopper_padded::run_act<argon_hopper_padded::PaddedActGemm<                    \
        Element, argon_hopper_padded::ConfigAt<index>::type>>(gemm, err, err_len);            \
  }
