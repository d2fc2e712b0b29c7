// The tile scheduler of the padded Hopper GEMM (hopper_padded_gemm.cuh): CUTLASS 3's sm90
// persistent kernels take their scheduler from cutlass::gemm::kernel::detail::TileSchedulerSelector,
// keyed by a tag type (GemmUniversal's fourth parameter); this file defines our tag and its
// specialization, so the kernel walks the plan's used tiles instead of a dense M x N x L grid.
//
// Algorithm. The plan (tile_m 128, the kernel's M tile; the mixed-input GEMM's token tile, 128
// or 64, which that kernel holds along N: "transposed" below) lays every expert's rows out in
// whole tiles; tile_expert[m] is tile m's expert and meta[ARGON_META_N_TILES] the number of
// tiles in use (the others come after them). The work is the used tiles times the N tiles, in
// the order of hopper_padded_order.h (windows of a few M tiles, M fastest inside one; the launch
// picks the window, order_window): work w is output tile (m, n) = work_tile(w), and its L
// coordinate (the "batch" CUTLASS indexes B by) is the expert tile_expert[m]. CTA b of a grid
// of G takes works b, b + G, b + 2G, ... (the kernel's persistent loop; the ping-pong kernel's
// second consumer warpgroup starts one step ahead and both step by two), so the G CTAs in
// flight share a few experts: the M tiles that read one B tile are neighbouring works, and the A
// rows of one M tile are read by tiles_n CTAs at about the same time.
//
// Why a scheduler of our own: the work list depends on device data (the used-tile count and each
// tile's expert), which no CUTLASS scheduler reads; and with one A, one B and one D tensor map
// for the whole problem (A and D have a stride-0 L mode, B an L stride of N * K), a tile's
// expert is nothing but the L coordinate of B's TMA loads: no per-group tensor maps, pointers or
// problem shapes in global memory (what CUTLASS's ptr-array grouped kernel rewrites whenever a
// CTA's next tile belongs to another expert).
//
// Limits. One CTA per cluster (1 x 1 clusters: a cluster along M would multicast one B tile to
// CTAs whose tiles may belong to different experts). The used-tile count is read once per CTA
// and clipped to [0, max_tiles_m] (the rows of a and d, known on the host), so a meta that no
// plan makes cannot reach past them; a used tile whose tile_expert is outside [0, E) gets L = E,
// a coordinate past B's last expert, which TMA reads as zeros: that tile of d is written with
// zeros and no memory outside the operands is touched.
//
// Transposed problems. The mixed-input GEMM (hopper_mixed_gemm.cuh) computes D^T = W @ X^T:
// its M mode is the weight's rows and its N mode the plan's token rows. Its tag,
// PaddedTilesTokensAlongN, selects the same scheduler with the two roles swapped: the plan's
// tiles (and tile_expert) index the CTA tile's N coordinate, the weight's tiles its M
// coordinate; the order and every limit above are the same with M and N exchanged. The count is read when the scheduler is
// made, before any wait on a preceding grid: right because no launch uses programmatic
// dependent launch (with it, the read would have to follow cudaGridDependencySynchronize).
#pragma once

#include <cstdint>

#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "hopper/hopper_padded_order.h"

namespace argon_hopper_padded {

// GemmUniversal's scheduler tags for the padded plan's tiles: along M (the plan's rows are the
// GEMM's M mode) and along N (the transposed problem, above).
struct PaddedTiles {};
struct PaddedTilesTokensAlongN {};

// What the launch passes (GemmUniversal's Arguments::scheduler). max_swizzle_size and
// raster_order are there because the kernel sets them when it sizes the grid; the order here
// is fixed (above), so they change nothing.
using Sm90SchedulerParams = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Params;

struct PaddedTileArguments {
  int max_swizzle_size = 1;
  Sm90SchedulerParams::RasterOrderOptions raster_order =
      Sm90SchedulerParams::RasterOrderOptions::AlongN;
  const int32_t* tile_expert = nullptr;  // [max_tiles_m], the plan's
  const int32_t* used_tiles = nullptr;   // the plan's meta[ARGON_META_N_TILES], on the device
  int32_t order_window = 1;              // M tiles a window of the order (hopper_padded_order.h)
};

struct PaddedTileParams {
  // the two fields GemmUniversal::get_grid_shape reads back
  int log_swizzle_size_ = 0;
  Sm90SchedulerParams::RasterOrder raster_order_ = Sm90SchedulerParams::RasterOrder::AlongN;
  const int32_t* tile_expert = nullptr;
  const int32_t* used_tiles = nullptr;
  int32_t max_tiles_m = 0;  // the plan's tiles a and d hold (M / 128; N / tile transposed)
  int32_t tiles_n = 0;      // ceil(N / TileN) (ceil(M / TileM) transposed)
  int32_t n_experts = 0;    // L
  int32_t order_window = 1;  // M tiles a window of the order, >= 1
};

template <bool TokensAlongN>
class PaddedTileSchedulerT {
  using Sm90Scheduler = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using RasterOrder = Sm90SchedulerParams::RasterOrder;
  using RasterOrderOptions = Sm90SchedulerParams::RasterOrderOptions;
  static constexpr bool IsDynamicPersistent = false;
  using Pipeline = Sm90Scheduler::Pipeline;
  using ThrottlePipeline = Sm90Scheduler::ThrottlePipeline;
  using SharedStorage = Sm90Scheduler::SharedStorage;
  using CLCResponse = Sm90Scheduler::CLCResponse;

  struct WorkTileInfo {
    int32_t M_idx = 0;
    int32_t N_idx = 0;
    int32_t L_idx = 0;
    bool is_valid_tile = false;

    CUTLASS_HOST_DEVICE bool is_valid() const { return is_valid_tile; }
    CUTLASS_HOST_DEVICE static WorkTileInfo invalid_work_tile() { return {-1, -1, -1, false}; }
    CUTLASS_HOST_DEVICE bool is_final_split(uint32_t) const { return true; }
    CUTLASS_HOST_DEVICE int32_t reduction_subtile_idx() const { return -1; }
  };

  using Arguments = PaddedTileArguments;
  using Params = PaddedTileParams;

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShape,
                                        ClusterShape, cutlass::KernelHardwareInfo const&,
                                        Arguments const& args, void* = nullptr,
                                        uint32_t = 1, uint32_t = 1) {
    static_assert(cute::size(ClusterShape{}) == 1, "the padded GEMM runs 1 x 1 clusters");
    constexpr int kTokens = TokensAlongN ? 1 : 0;  // the problem mode of the plan's rows
    Params p;
    p.tile_expert = args.tile_expert;
    p.used_tiles = args.used_tiles;
    p.max_tiles_m = static_cast<int32_t>(cute::ceil_div(cute::get<kTokens>(problem_shape_mnkl),
                                                        cute::size<kTokens>(TileShape{})));
    p.tiles_n = static_cast<int32_t>(cute::ceil_div(cute::get<1 - kTokens>(problem_shape_mnkl),
                                                    cute::size<1 - kTokens>(TileShape{})));
    p.n_experts = static_cast<int32_t>(cute::get<3>(problem_shape_mnkl));
    p.order_window = args.order_window;
    return p;
  }

  CUTLASS_HOST_DEVICE static bool can_implement(Arguments const& args) {
    return args.tile_expert != nullptr && args.used_tiles != nullptr && args.order_window >= 1;
  }

  // One CTA per multiprocessor, fewer where the largest possible work list (every tile of a and
  // d in use) is shorter: the used-tile count itself is on the device only.
  template <class ProblemShapeMNKL, class BlockShape, class ClusterShape>
  static dim3 get_grid_shape(Params const& params, ProblemShapeMNKL, BlockShape, ClusterShape,
                             cutlass::KernelHardwareInfo hw_info, Arguments = Arguments{},
                             bool = true) {
    const int64_t works = int64_t(params.max_tiles_m) * params.tiles_n;
    const int64_t ctas = works < hw_info.sm_count ? works : hw_info.sm_count;
    return dim3(static_cast<uint32_t>(ctas > 0 ? ctas : 1), 1, 1);
  }

  template <class ProblemShape, class ElementAccumulator>
  static size_t get_workspace_size(Arguments const&, ProblemShape,
                                   cutlass::KernelHardwareInfo const&, uint32_t,
                                   uint32_t = 1, uint32_t = 1) {
    return 0;
  }

  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(Arguments const&, void*, cudaStream_t, ProblemShape,
                                              cutlass::KernelHardwareInfo const&, uint32_t,
                                              uint32_t = 1, uint32_t = 1,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE PaddedTileSchedulerT() {}

  CUTLASS_DEVICE explicit PaddedTileSchedulerT(Params const& params) : params_(params) {
#if defined(__CUDA_ARCH__)
    next_ = blockIdx.x;
    step_ = gridDim.x;
    int32_t used = *params.used_tiles;
    used = used < 0 ? 0 : used > params.max_tiles_m ? params.max_tiles_m : used;
    used_ = used;
    works_ = uint64_t(used) * uint64_t(params.tiles_n);
#endif
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }

  CUTLASS_DEVICE WorkTileInfo get_current_work() const { return work_at(next_); }

  CUTLASS_DEVICE void advance_to_next_work(uint32_t advance_count = 1) {
    next_ += step_ * uint64_t(advance_count);
  }

  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }

  template <class TileSchedulerPipeline, class TileSchedulerPipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, TileSchedulerPipeline&,
                                      TileSchedulerPipelineState) {
    return fetch_next_work(work);
  }

  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo&, uint32_t advance_count = 1) const {
    return !work_at(next_ + step_ * uint64_t(advance_count)).is_valid();
  }

  // Every work is one whole output tile over all of K: no split-K, no reduction.
  template <class ProblemShape, class TileShape>
  CUTLASS_HOST_DEVICE static int get_work_k_tile_count(WorkTileInfo const&,
                                                       ProblemShape problem_shape,
                                                       TileShape tile_shape) {
    return cute::size(cute::ceil_div(cute::get<2>(problem_shape), cute::get<2>(tile_shape)));
  }
  CUTLASS_HOST_DEVICE static uint32_t get_work_k_tile_start(WorkTileInfo const&) { return 0u; }
  CUTLASS_HOST_DEVICE static bool compute_epilogue(WorkTileInfo const&, Params const&) {
    return true;
  }
  CUTLASS_HOST_DEVICE static bool compute_epilogue(WorkTileInfo const&) { return true; }
  CUTLASS_DEVICE static bool requires_separate_reduction(Params const&) { return false; }
  CUTLASS_DEVICE static bool valid_warpgroup_in_work_tile(WorkTileInfo const&) { return true; }
  CUTLASS_DEVICE static bool continue_current_work(WorkTileInfo&) { return false; }
  template <class FrgTensorC>
  CUTLASS_DEVICE static void fixup(Params const&, WorkTileInfo const&, FrgTensorC&, uint32_t,
                                   uint32_t) {}
  template <class FrgTensorC>
  CUTLASS_DEVICE void fixup(WorkTileInfo const&, FrgTensorC&, uint32_t, uint32_t) const {}

 private:
  CUTLASS_DEVICE WorkTileInfo work_at(uint64_t work) const {
    if (work >= works_) return WorkTileInfo::invalid_work_tile();
    // m < used <= max_tiles_m and n < tiles_n, both int32 (the glue's checks)
    const TileMN tile = work_tile(work, used_, params_.tiles_n, params_.order_window);
    const int32_t m = tile.m, n = tile.n;
    int32_t expert = params_.tile_expert[m];
    if (expert < 0 || expert >= params_.n_experts) expert = params_.n_experts;  // read as zeros
    if constexpr (TokensAlongN) return {n, m, expert, true};
    return {m, n, expert, true};
  }

  Params params_;
  uint64_t next_ = 0;   // this CTA's (or consumer warpgroup's) next work
  uint64_t step_ = 1;   // the grid's CTAs
  int32_t used_ = 0;    // the plan's used tiles, clipped to [0, max_tiles_m]
  uint64_t works_ = 0;  // used tiles x tiles_n
};

using PaddedTileScheduler = PaddedTileSchedulerT<false>;

}  // namespace argon_hopper_padded

// The selector CUTLASS's sm90 kernels consult (their fifth argument, the scheduler pipeline's
// stage count, is unused by a static scheduler).
namespace cutlass::gemm::kernel::detail {
template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<argon_hopper_padded::PaddedTiles, arch::Sm90, TileShape,
                             ClusterShape, SchedulerPipelineStageCount> {
  using Scheduler = argon_hopper_padded::PaddedTileSchedulerT<false>;
};
template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<argon_hopper_padded::PaddedTilesTokensAlongN, arch::Sm90, TileShape,
                             ClusterShape, SchedulerPipelineStageCount> {
  using Scheduler = argon_hopper_padded::PaddedTileSchedulerT<true>;
};
}  // namespace cutlass::gemm::kernel::detail
