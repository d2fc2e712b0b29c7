// moe_plan on CUDA: the launcher, which picks a kernel and its shape, and the registrations.
//   E <= kGridMaxExperts: plan_grid_kernel<C, Id> (plan_grid.cuh), one launch, in the first
//     shape that holds the plan: one segment up to kGridOneSegmentEntries entries (replicated,
//     so that the writes spread); on sm_90+, clusters of 4 segments up to one chunk per warp,
//     of 8 up to kGridClusterChunks, of 16 (where the device runs that non-portable size) up to
//     8, replicated; then, with cooperative launch, the grid shape (one segment per resident
//     block, up to 128 blocks of up to 8 chunks per warp).
//   Otherwise, or where no shape holds the plan: the portable fallback (plan_portable.cuh).
// Every path gives the same bytes (the reference's). The constants come from H200 runs
// (bench/plan_cuda_notes.md, "The launcher's choices").
//
// The shipped build makes the automatic choice, fixed. The lab build (ARGON_PLAN_LAB=1 at build
// time, which the bench scripts set) adds process-wide knobs over it and a device query, the
// argon_cuda library that torch_argon/testing/plan_tuning.py wraps.
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include <ATen/cuda/EmptyTensor.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "plan_grid.cuh"
#include "plan_portable.cuh"

namespace argon::cuda {
namespace {

constexpr int kGridMaxExperts = 1022;  // 10-bit keys
constexpr int kGridOneSegmentEntries = 2 * kGridThreads;
constexpr int kGridReplicas = 32;           // one segment: blocks in all
constexpr int kGridClusterBlocks = 64;      // clusters of up to 8: blocks in all
constexpr int kGridClusterChunks = 5;       // clusters of 8: chunks per warp at most
constexpr int kGridBigCluster = 16;         // the non-portable cluster size
constexpr int kGridBigClusterReplicas = 7;  // at most what the device holds at once
constexpr int kGridShape = kGridMaxClusterSegments + 1;  // PlanChoice::grid_cluster: grid shape

// What the launcher may choose: the automatic choice by default (0 is automatic). The fields in
// the order of torch_argon/testing/plan_tuning.py's knobs.
struct PlanChoice {
  int pdl = 1;             // dependent launch where the device has it (0: never)
  int grid_max = 1 << 30;  // the grid kernel up to this many entries (0: never)
  int grid_replicas = 0;   // cluster shape: replicas
  int grid_chunks = 0;     // grid kernel: chunks per warp
  int grid_cluster = 0;    // 1-16: the cluster shape with that many segments; kGridShape
};
#ifdef ARGON_PLAN_LAB
PlanChoice g_choice;  // the lab build's knobs
#else
constexpr PlanChoice g_choice{};
#endif

using PlanKernel = void (*)(PlanParams);
// One grid kernel per chunk count and id type, [ids_64][C - 1] (int32 ids: half the bytes).
template <typename Id>
constexpr PlanKernel kGridKernelsFor[kGridMaxChunks] = {
    plan_grid_kernel<1, Id>, plan_grid_kernel<2, Id>, plan_grid_kernel<3, Id>,
    plan_grid_kernel<4, Id>, plan_grid_kernel<5, Id>, plan_grid_kernel<6, Id>,
    plan_grid_kernel<7, Id>, plan_grid_kernel<8, Id>};
constexpr const PlanKernel* kGridKernels[2] = {kGridKernelsFor<int32_t>, kGridKernelsFor<int64_t>};

// Clusters of `size` blocks of `kernel` with `smem` bytes each that the device holds at once (0
// if none, or if it refuses the query: an answer, not an error to leave pending).
int active_clusters(PlanKernel kernel, size_t smem, int size) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {static_cast<unsigned>(size), 1, 1};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(size);
  cfg.blockDim = dim3(kGridThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return clusters;
}

// What the device offers the plan kernels, found once per device (which also opts the kernels
// in to the shared memory they may need).
struct PlanDevice {
  size_t smem_room = 0;      // dynamic shared memory a grid kernel block may have
  size_t fallback_room = 0;  // ... a plan_offsets_kernel block may have
  // The cluster shape asks for more than half an SM's shared memory, so that no SM takes two of
  // its blocks: launched early behind another kernel, two to an SM ran the plan on half the SMs.
  size_t alone_smem = 0;
  int resident_blocks = 0;  // grid kernel blocks held at once under cooperative launch (0: none)
  bool sm90_code = false;   // sm_90+ with sm_90 code: dependent launch and clusters
  bool clusters = false;    // clusters of up to 8 blocks
  int big_clusters = 0;     // clusters of kGridBigCluster blocks held at once
  // The dynamic shared memory of a launch of `cluster` segments (0: the grid shape) whose
  // layout needs `need` bytes.
  size_t launch_smem(size_t need, int cluster) const {
    return cluster > 0 ? std::max(need, alone_smem) : need;
  }
};

PlanDevice plan_device(const cudaDeviceProp& props) {
  static PlanDevice known[64];
  static bool asked[64] = {};
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && asked[dev]) return known[dev];
  PlanDevice d;
  cudaFuncAttributes fallback{}, grid{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&fallback, plan_offsets_kernel));
  d.fallback_room = props.sharedMemPerBlockOptin - fallback.sharedSizeBytes;
  C10_CUDA_CHECK(cudaFuncSetAttribute(plan_offsets_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(d.fallback_room)));
  // The grid kernels of both id types have the same static shared memory and, one block per SM
  // (launch bounds), the same residency: the widest (C = 8) answers for all.
  const PlanKernel widest = kGridKernels[1][kGridMaxChunks - 1];
  C10_CUDA_CHECK(cudaFuncGetAttributes(&grid, widest));
  d.smem_room = props.sharedMemPerBlockOptin - grid.sharedSizeBytes;
  d.alone_smem = std::min(props.sharedMemPerMultiprocessor / 2 + 1 -
                              props.reservedSharedMemPerBlock - grid.sharedSizeBytes,
                          d.smem_room);
  // Residency and clusters at the most a plan of the shape may ask for.
  const auto widest_smem = [&](int cluster) {
    return std::min(
        d.launch_smem(plan_grid_smem_bytes(kGridMaxExperts, kGridMaxChunks, cluster), cluster),
        d.smem_room);
  };
  const bool sm90 = props.major >= 9 && grid.ptxVersion >= 90;  // a JIT from older PTX: no
  bool big = sm90;  // clusters above 8 blocks need each kernel's opt-in
  for (const PlanKernel* kernels : kGridKernels) {
    for (int c = 1; c <= kGridMaxChunks; ++c) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernels[c - 1],
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(widest_smem(kGridMaxClusterSegments))));
      big = big && cudaFuncSetAttribute(kernels[c - 1],
                                        cudaFuncAttributeNonPortableClusterSizeAllowed,
                                        1) == cudaSuccess;
    }
  }
  if (!big) (void)cudaGetLastError();  // a device that refuses runs no such clusters
  int coop = 0, per_sm = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, widest, kGridThreads,
                                                               widest_smem(0)));
  d.resident_blocks = coop ? per_sm * props.multiProcessorCount : 0;
  d.sm90_code = sm90;
  d.clusters = sm90 && active_clusters(widest, widest_smem(8), 8) >= 1;
  d.big_clusters = big && d.clusters
                       ? active_clusters(widest, widest_smem(kGridBigCluster), kGridBigCluster)
                       : 0;
  if (dev < 64) {
    known[dev] = d;
    asked[dev] = true;
  }
  return d;
}

// The grid kernel's shape for a plan of n entries: `cluster` segments per cluster (0: the grid
// shape), C chunks per warp, `blocks`; false if no shape the choice allows holds it.
struct GridShape {
  int cluster = 0, chunks = 0, blocks = 0;
};
bool grid_shape(int64_t n, const cudaDeviceProp& props, const PlanDevice& dev,
                const PlanChoice& ch, GridShape& shape) {
  n = std::max<int64_t>(n, 1);
  int cluster = ch.grid_cluster;
  if (cluster == 0) {  // clusters of k segments of up to `chunks` per warp hold k 512 chunks
    const auto clusters_hold = [&](int64_t k, int64_t chunks) {
      return dev.clusters && (k <= 8 || dev.big_clusters > 0) && n <= k * kGridThreads * chunks;
    };
    cluster = n <= kGridOneSegmentEntries                      ? 1
              : clusters_hold(4, 1)                            ? 4
              : clusters_hold(8, kGridClusterChunks)           ? 8
              : clusters_hold(kGridBigCluster, kGridMaxChunks) ? kGridBigCluster
              : dev.resident_blocks > 0                        ? kGridShape
                                                               : 1;
  }
  if (cluster == kGridShape) {
    const int64_t max_segments = std::min(dev.resident_blocks, kGridMaxBlocks);
    if (max_segments == 0) return false;
    const int64_t chunks =
        ch.grid_chunks > 0 ? ch.grid_chunks : ceil_div(n, int64_t{kGridThreads} * max_segments);
    const int64_t segments = ceil_div(n, kGridThreads * chunks);
    if (chunks > kGridMaxChunks || segments > max_segments) return false;
    shape = {0, static_cast<int>(chunks), static_cast<int>(segments)};
    return true;
  }
  if ((cluster > 1 && !dev.clusters) || (cluster > 8 && dev.big_clusters == 0)) return false;
  const int64_t chunks =
      ch.grid_chunks > 0 ? ch.grid_chunks : ceil_div(n, int64_t{kGridThreads} * cluster);
  if (chunks > kGridMaxChunks || n > int64_t{kGridThreads} * chunks * cluster) return false;
  const int replicas = ch.grid_replicas > 0 ? ch.grid_replicas
                       : cluster == 1       ? kGridReplicas
                       : cluster <= 8       ? kGridClusterBlocks / cluster
                                            : std::min(kGridBigClusterReplicas, dev.big_clusters);
  shape = {cluster, static_cast<int>(chunks),
           std::min(replicas, std::max(1, props.multiProcessorCount / cluster)) * cluster};
  return true;
}

// Launches the grid kernel if the plan fits it (returns false, launching nothing, if not).
bool launch_grid(PlanParams& p, const cudaDeviceProp& props, const PlanDevice& dev,
                 const PlanChoice& ch, const at::Device& device, cudaStream_t s) {
  GridShape shape;
  if (p.n > ch.grid_max || p.E > kGridMaxExperts || !grid_shape(p.n, props, dev, ch, shape)) {
    return false;
  }
  const size_t need = plan_grid_smem_bytes(p.E, shape.chunks, shape.cluster);
  if (need > dev.smem_room) return false;
  p.cluster = shape.cluster;
  Tensor workspace;  // alive until the launch is queued (the allocator is stream-ordered)
  cudaLaunchAttribute attrs[2] = {};
  int n_attrs = 0;
  if (shape.cluster == 0) {
    workspace = at::detail::empty_cuda({plan_grid_workspace_ints(p.E, shape.blocks)}, at::kInt,
                                       device, std::nullopt);
    p.block_hist = workspace.data_ptr<int>();
    attrs[n_attrs].id = cudaLaunchAttributeCooperative;  // every block resident: grid barriers
    attrs[n_attrs++].val.cooperative = 1;
  } else if (shape.cluster > 1) {
    attrs[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[n_attrs++].val.clusterDim = {static_cast<unsigned>(shape.cluster), 1, 1};
  }
  // The cluster shape (not the grid shape, whose blocks must all be resident at once) may start
  // while the previous kernel of the stream ends, if that kernel lets it (a plan, the Triton
  // router top-k): its launch and zeroing overlap that kernel.
  p.pdl = ch.pdl && shape.cluster > 0 && dev.sm90_code;
  if (p.pdl) {
    attrs[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n_attrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(shape.blocks);
  cfg.blockDim = dim3(kGridThreads);
  cfg.dynamicSmemBytes = dev.launch_smem(need, shape.cluster);
  cfg.stream = s;
  cfg.attrs = attrs;
  cfg.numAttrs = n_attrs;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kGridKernels[p.ids_64 ? 1 : 0][shape.chunks - 1], p));
  ARGON_CUDA_CHECK_LAUNCH();
  return true;
}

// Launches the plan into outputs of the checked shapes.
void launch_plan(const PlanDims& d, const Tensor& ids, const Tensor& w, const Tensor& counts,
                 const Tensor& offsets, const Tensor& sorted_token, const Tensor& sorted_weight,
                 const Tensor& pos, const Tensor& tile_expert, const Tensor& meta) {
  const int E = static_cast<int>(d.E);
  const auto* props = at::cuda::getCurrentDeviceProperties();
  const PlanDevice dev = plan_device(*props);
  const int64_t e_limit = dev.fallback_room / sizeof(int);
  TORCH_CHECK_VALUE(E <= e_limit, "moe_plan on CUDA supports n_expert up to ", e_limit,
              " on this device, got ", E);
  PlanParams p{ids.const_data_ptr(), w.const_data_ptr(), float_kind(w.scalar_type()),
               ids.scalar_type() == at::kLong, static_cast<int>(d.entries()),
               static_cast<int>(d.K), E, static_cast<int>(d.tile_m), static_cast<int>(d.r_max),
               static_cast<int>(d.n_tiles)};
  p.counts = counts.data_ptr<int>();
  p.offsets = offsets.data_ptr<int>();
  p.sorted_token = sorted_token.data_ptr<int>();
  p.sorted_weight = sorted_weight.data_ptr<float>();
  p.pos = pos.data_ptr<int>();
  p.tile_expert = tile_expert.data_ptr<int>();
  p.meta = meta.data_ptr<int>();
  const cudaStream_t s = stream();
  if (launch_grid(p, *props, dev, g_choice, ids.device(), s)) return;

  // The portable fallback.
  const auto ints = [&](int64_t size) {
    return at::detail::empty_cuda({size}, at::kInt, ids.device(), std::nullopt);
  };
  const Tensor keys = ints(p.n), runs = ints(2 * (int64_t{E} + 2));
  p.keys = keys.data_ptr<int>();
  p.runs = runs.data_ptr<int>();
  const int blocks = grid_for(std::max<int64_t>({p.n, p.r_max, 2 * (E + 2)}), kFallbackThreads);
  plan_keys_kernel<<<blocks, kFallbackThreads, 0, s>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
  const auto [sorted, order] = at::sort(keys, /*stable=*/std::optional<bool>(true), /*dim=*/0);
  p.keys = sorted.data_ptr<int>();
  p.order = order.data_ptr<int64_t>();
  plan_runs_kernel<<<blocks, kFallbackThreads, 0, s>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
  plan_offsets_kernel<<<1, kFallbackScanThreads, E * sizeof(int), s>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
  plan_scatter_kernel<<<blocks, kFallbackThreads, 0, s>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
}

void moe_plan_out_cuda(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                       int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                       const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                       const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, topk_weights, counts, offsets, sorted_token, sorted_weight, pos,
                     tile_expert, meta);
  const c10::cuda::CUDAGuard guard(topk_ids.device());
  launch_plan(d, topk_ids.contiguous(), topk_weights.contiguous(), counts, offsets, sorted_token,
              sorted_weight, pos, tile_expert, meta);
}

// The functional form, registered for CUDA to cut eager overhead: its seven outputs come
// straight from the CUDA allocator (no dispatcher round trip each; one shared allocation would
// make the outputs alias, which the schema does not declare).
PlanOutputs moe_plan_cuda(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                          int64_t tile_m) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  const auto dev = topk_ids.device();
  const c10::cuda::CUDAGuard guard(dev);
  PlanOutputs out = make_plan_outputs(
      d, [&](std::initializer_list<int64_t> size, at::ScalarType dtype) {
        return Tensor(at::detail::empty_cuda(size, dtype, dev, std::nullopt));
      });
  const auto& [counts, offsets, sorted_token, sorted_weight, pos, tile_expert, meta] = out;
  launch_plan(d, topk_ids.contiguous(), topk_weights.contiguous(), counts, offsets, sorted_token,
              sorted_weight, pos, tile_expert, meta);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_plan_out", TORCH_FN(moe_plan_out_cuda));
  m.impl("moe_plan", TORCH_FN(moe_plan_cuda));
}

#ifdef ARGON_PLAN_LAB
namespace {
// Sets the knobs (PlanChoice's fields, in order) that are >= 0, for every later moe_plan; all
// are checked before any changes. Returns the previous values.
std::vector<int64_t> plan_tuning(c10::IntArrayRef knobs) {
  TORCH_CHECK(knobs.size() == 5, "plan_tuning: expected 5 knobs, got ", knobs.size());
  TORCH_CHECK(knobs[3] <= kGridMaxChunks, "plan_tuning: grid_chunks must be at most ",
              kGridMaxChunks, ", got ", knobs[3]);
  TORCH_CHECK(knobs[4] <= kGridShape, "plan_tuning: grid_cluster must be at most ", kGridShape,
              " (the grid shape), got ", knobs[4]);
  int* fields[5] = {&g_choice.pdl, &g_choice.grid_max, &g_choice.grid_replicas,
                    &g_choice.grid_chunks, &g_choice.grid_cluster};
  std::vector<int64_t> previous;
  for (int i = 0; i < 5; ++i) {
    previous.push_back(*fields[i]);
    if (knobs[i] >= 0) *fields[i] = static_cast<int>(std::min<int64_t>(knobs[i], 1 << 30));
  }
  return previous;
}

// What plan_device found: [resident blocks under cooperative launch, clusters of up to 8 (0 /
// 1), clusters of 16 held at once, the dynamic shared memory a grid kernel block may have, the
// most blocks of the cluster shape an SM holds at once (any C, at its least request)].
std::vector<int64_t> plan_grid_device() {
  const PlanDevice d = plan_device(*at::cuda::getCurrentDeviceProperties());
  int most = 0;
  for (const PlanKernel* kernels : kGridKernels) {
    for (int c = 1; c <= kGridMaxChunks; ++c) {
      int per_sm = 0;
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, kernels[c - 1], kGridThreads, d.launch_smem(plan_grid_smem_bytes(1, c, 2), 2)));
      most = std::max(most, per_sm);
    }
  }
  return {d.resident_blocks, d.clusters ? 1 : 0, d.big_clusters,
          static_cast<int64_t>(d.smem_room), most};
}
}  // namespace

TORCH_LIBRARY(argon_cuda, m) {
  m.def("plan_tuning(int[] knobs) -> int[]", TORCH_FN(plan_tuning));
  m.def("plan_grid_device() -> int[]", TORCH_FN(plan_grid_device));
}
#endif

}  // namespace argon::cuda
