// The experts' grouped GEMM on Hopper (sm_90a): CUTLASS 3's ptr-array grouped GEMM, one group per
// expert, its problem shapes and pointers made on the device from the plan.
//
// Algorithm. Each group e is the GEMM d_e [m_e, n] = a_e [m_e, k] @ b_e [n, k]^T with
// m_e = counts[e] rows starting at row offsets[e] of a and d (the plan's layout), b_e the
// expert's weight. CUTLASS's warp-specialized kernel runs it: a producer warp moves A and B tiles
// into a ring of shared-memory stages with TMA (each group's tensor maps rewritten on the device
// when a CTA moves to a new group, so a group's rows past m_e are never read and never written:
// the TMA bounds clip them), consumer warpgroups multiply with wgmma into fp32 registers
// (ping-pong: two warpgroups on alternate tiles, one's epilogue overlapping the other's
// mainloop; cooperative: both on one tile, split along M), and the epilogue rounds to the
// output dtype and stores through TMA. The grid is persistent: one CTA (cluster) per
// multiprocessor walks the tiles of every group, group after group (expert-major, so an expert's
// weight tiles are read from L2 by the CTAs that share it at about the same time).
//
// Launch shape. A setup kernel of ceil(n_groups / 128) blocks of 128 threads writes the groups'
// shapes, pointers and strides into the workspace; then the GEMM: sm_count / cluster CTAs of
// 384 threads (one producer warpgroup, two consumer warpgroups), the shared memory that the
// stage count allows (CUTLASS's StageCountAutoCarveout), launched on the same stream: the GEMM
// reads what the setup kernel wrote by stream order alone.
//
// Limits. n and k multiples of 8 (16-byte TMA rows) and a, b, d 16-byte aligned (the glue
// checks both); m_e of 0 is a group with no tiles, which the scheduler steps over. No host
// problem shapes are given (they are on the device only): CUTLASS's can_implement then checks no
// alignments, which is why the glue does.
#pragma once

#include <cstdint>
#include <cstdio>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include "hopper/hopper_cutlass_launch.cuh"
#include "hopper/hopper_gemm.h"

namespace argon_hopper {

using cute::Int;
using cute::Shape;

// One compiled configuration: the CTA tile (M x N x K), the cluster, and the two schedules.
template <int TileM, int TileN, int ClusterM, class Mainloop, class Epilogue>
struct Config {
  using TileShape = Shape<Int<TileM>, Int<TileN>, Int<64>>;
  using ClusterShape = Shape<Int<ClusterM>, Int<1>, Int<1>>;
  using MainloopSchedule = Mainloop;
  using EpilogueSchedule = Epilogue;
};

using PingpongSmall = Config<64, 128, 1, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                             cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
using Pingpong = Config<128, 128, 1, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                        cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
using CooperativeWide =
    Config<128, 256, 2, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
           cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;

// The CUTLASS kernel of one element type and configuration: A row-major [m, k], B column-major
// as a k x n matrix (= the expert's [n, k] row-major weight), D row-major [m, n]; no C operand
// (the epilogue writes alpha * acc, alpha = 1: one rounding of the fp32 accumulator).
template <class Element, class Cfg>
struct GroupedGemm {
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignment = 8;  // elements per 16 bytes

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::TileShape,
      typename Cfg::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD*, kAlignment, Element, LayoutD*, kAlignment,
      typename Cfg::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlignment,
      Element, LayoutB*, kAlignment, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Cfg::MainloopSchedule>::CollectiveOp;

  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using GroupShape = typename ProblemShape::UnderlyingProblemShape;
};

// Where each array lives in the workspace: every region starts on a 128-byte boundary.
struct WorkspaceLayout {
  size_t shapes, ptr_a, ptr_b, ptr_d, stride_a, stride_b, stride_d, cutlass, total;
};

inline size_t align128(size_t bytes) { return (bytes + 127) / 128 * 128; }

template <class G>
WorkspaceLayout workspace_layout(int n_groups, size_t cutlass_bytes) {
  const size_t e = static_cast<size_t>(n_groups);
  WorkspaceLayout w{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t start = at;
    at += align128(bytes);
    return start;
  };
  w.shapes = take(e * sizeof(typename G::GroupShape));
  w.ptr_a = take(e * sizeof(void*));
  w.ptr_b = take(e * sizeof(void*));
  w.ptr_d = take(e * sizeof(void*));
  w.stride_a = take(e * sizeof(typename G::StrideA));
  w.stride_b = take(e * sizeof(typename G::StrideB));
  w.stride_d = take(e * sizeof(typename G::StrideD));
  w.cutlass = take(cutlass_bytes);
  w.total = at;
  return w;
}

// The arguments CUTLASS gets: grouped mode, n_groups problems whose shapes are on the device
// only, the per-group arrays of the workspace, alpha 1 / beta 0 and no C.
template <class G>
typename G::Gemm::Arguments arguments(char* ws, const WorkspaceLayout& w, int n_groups,
                                      int sm_count) {
  using Element = typename G::Gemm::ElementA;
  cutlass::KernelHardwareInfo hw{};
  cudaGetDevice(&hw.device_id);
  hw.sm_count = sm_count;
  typename G::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {n_groups, reinterpret_cast<typename G::GroupShape*>(ws + w.shapes), nullptr},
      {reinterpret_cast<const Element**>(ws + w.ptr_a),
       reinterpret_cast<typename G::StrideA*>(ws + w.stride_a),
       reinterpret_cast<const Element**>(ws + w.ptr_b),
       reinterpret_cast<typename G::StrideB*>(ws + w.stride_b)},
      {{}, nullptr, nullptr, reinterpret_cast<Element**>(ws + w.ptr_d),
       reinterpret_cast<typename G::StrideD*>(ws + w.stride_d)},
      hw};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  return args;
}

template <class G>
size_t cutlass_workspace_bytes(int n_groups, int sm_count) {
  WorkspaceLayout none{};
  return G::Gemm::get_workspace_size(arguments<G>(nullptr, none, n_groups, sm_count));
}

template <class G>
size_t workspace_bytes(int n_groups, int sm_count) {
  return workspace_layout<G>(n_groups, cutlass_workspace_bytes<G>(n_groups, sm_count)).total;
}

// One thread per expert: its problem shape (counts[e] rows, clipped to a's rows), the addresses
// of its rows of a and d and of its weight, and the three packed strides.
template <class G, class Element>
__global__ void build_groups(const int32_t* __restrict__ offsets,
                             const int32_t* __restrict__ counts, int n_groups, int64_t rows,
                             int n, int k, const Element* a, const Element* b, Element* d,
                             char* ws, WorkspaceLayout w) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n_groups) return;
  // A plan's groups lie inside [0, rows); anything else is clipped here, on the device.
  const int64_t row = offsets[e];
  const int64_t inside = row < 0 || row > rows ? 0 : rows - row;
  const int m = static_cast<int>(counts[e] < 0 ? 0 : counts[e] < inside ? counts[e] : inside);
  reinterpret_cast<typename G::GroupShape*>(ws + w.shapes)[e] = typename G::GroupShape{m, n, k};
  reinterpret_cast<const Element**>(ws + w.ptr_a)[e] = a + row * k;
  reinterpret_cast<const Element**>(ws + w.ptr_b)[e] = b + static_cast<int64_t>(e) * n * k;
  reinterpret_cast<Element**>(ws + w.ptr_d)[e] = d + row * n;
  reinterpret_cast<typename G::StrideA*>(ws + w.stride_a)[e] =
      cutlass::make_cute_packed_stride(typename G::StrideA{}, {m, k, 1});
  reinterpret_cast<typename G::StrideB*>(ws + w.stride_b)[e] =
      cutlass::make_cute_packed_stride(typename G::StrideB{}, {n, k, 1});
  reinterpret_cast<typename G::StrideD*>(ws + w.stride_d)[e] =
      cutlass::make_cute_packed_stride(typename G::StrideD{}, {m, n, 1});
}

constexpr const char* kKernel = "hopper grouped GEMM";

inline int fail(char* err, int err_len, const char* what, const char* detail) {
  return argon_hopper_launch::fail(err, err_len, kKernel, what, detail);
}

template <class G>
int run(const ArgonHopperGemm& p, char* err, int err_len) {
  using Element = typename G::Gemm::ElementA;
  const WorkspaceLayout w =
      workspace_layout<G>(p.n_groups, cutlass_workspace_bytes<G>(p.n_groups, p.sm_count));
  if (p.workspace_bytes < w.total) return fail(err, err_len, "workspace smaller than its size", "");
  char* ws = static_cast<char*>(p.workspace);
  auto* stream = static_cast<cudaStream_t>(p.stream);
  constexpr int kThreads = 128;
  build_groups<G, Element><<<(p.n_groups + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      p.offsets, p.counts, p.n_groups, p.rows, p.n, p.k, static_cast<const Element*>(p.a),
      static_cast<const Element*>(p.b), static_cast<Element*>(p.d), ws, w);
  cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess)
    return fail(err, err_len, "setup kernel: ", cudaGetErrorString(launched));

  const auto args = arguments<G>(ws, w, p.n_groups, p.sm_count);
  return argon_hopper_launch::launch<typename G::Gemm>(args, ws + w.cutlass, stream, kKernel, err,
                                                       err_len);
}

// ConfigAt<i>::type: the configuration of hopper_gemm.h's index i (configs.py's CONFIGS order).
template <int I>
struct ConfigAt;
template <>
struct ConfigAt<0> {
  using type = PingpongSmall;
};
template <>
struct ConfigAt<1> {
  using type = Pingpong;
};
template <>
struct ConfigAt<2> {
  using type = CooperativeWide;
};

}  // namespace argon_hopper

// One unit per element type and configuration (hopper_gemm_<dtype>_<config>.cu: the six compile
// in parallel, each one CUTLASS kernel) defines hopper_units.h's two functions of its pair.
#define ARGON_HOPPER_UNIT(suffix, Element, index)                                               \
  size_t argon_hopper_workspace_bytes_##suffix##_##index(int n_groups, int sm_count) {          \
    return argon_hopper::workspace_bytes<argon_hopper::GroupedGemm<                             \
        Element, argon_hopper::ConfigAt<index>::type>>(n_groups, sm_count);                     \
  }                                                                                             \
  int argon_hopper_run_##suffix##_##index(const ArgonHopperGemm& gemm, char* err, int err_len) { \
    return argon_hopper::run<                                                                   \
        argon_hopper::GroupedGemm<Element, argon_hopper::ConfigAt<index>::type>>(gemm, err,     \
                                                                                  err_len);     \
  }
