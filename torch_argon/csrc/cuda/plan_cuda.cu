// moe_plan on CUDA: the launcher, which picks a kernel, and the op registrations.
//   Where E <= kGridMaxExperts: plan_grid_kernel<C, Id> (plan_grid.cuh), one launch for any n up
//     to 8 chunks per warp over the resident blocks. Up to kGridOneSegmentEntries entries the
//     plan is one segment that every block ranks (the blocks share the writes); on sm_90,
//     4, 8 or 16 segments on the blocks of a cluster (8 up to kGridClusterChunks per warp,
//     then 16, where the device runs that non-portable size, up to kGridBigClusterChunks),
//     replicated;
//     above, with cooperative launch, one segment per block, as many blocks as the GPU holds
//     (up to 128), exchanging counts across grid barriers. Where a shape does not fit (no
//     clusters, no cooperative launch, too many entries), the next one or the portable kernels.
//   Otherwise: the portable kernels (plan_portable.cuh): one kernel up to kSingleMaxEntries,
//     count + place kernels above.
// All give the same bytes (the reference's); the CUDA tests run each on the same inputs.
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

// Tuning knobs, process-wide; set only by the benchmark and tests through plan_tuning.
// Portable one-kernel path up to this n. H200 (plan_variants): at n = 1280 one kernel 10.7-11.7
// us, two 12.1-12.4; at n = 4090 one kernel 22.5-22.8 us, two 11.4-11.9.
constexpr int kSingleMaxEntries = 2048;
// The grid kernel: keys are 10-bit (warp_peers) and E + 2 columns fit four per thread.
constexpr int kGridMaxExperts = 1022;
// Its shapes (H200, E = 512, K = 10, the kernel alone under graph replay, lab, before each
// replica ranked only its own chunks; us):
//   one segment up to 2 chunks per warp, on 32 replicas (T = 16: 4.2, against 5.2 for
//   clusters of 4);
//   clusters of 4 segments (16 replicas) up to 1 chunk (T = 128: 5.4, one segment 5.9);
//   clusters of 8 (8 replicas) up to 5 chunks (T = 256, 1 chunk: 5.6 against 6.2 for clusters
//   of 4, kernel alone, earlier; since the loads of all chunks are in flight, lab, plans back
//   to back, uniform / Zipf: T = 1024 5.18 / 5.26 against 5.67 / 5.62 for clusters of 16;
//   T = 2048 5.86 / 5.80 against 6.34 / 6.25; T = 512 5.04 / 5.05 against 5.11 / 5.11;
//   T = 3072, 8 chunks, 7.80 / 7.44 against 6.63 / 6.41; 6 and 7 chunks not timed);
//   clusters of 16 (6 replicas, now 7; a non-portable size, where the device runs it) up to 8
//   chunks (kernel alone, before the replicas ranked only their chunks: T = 2048 7.8 against
//   9.7 for the grid shape; T = 4096 9.4 against 10.3. Plans back to back since then: T = 6144
//   with 8 chunks 9.4-9.7 against 10.8-11.2 for the grid shape, a lab A/B not in
//   bench/results/h200.json); then the grid shape.
constexpr int kGridOneSegmentEntries = 2 * kGridThreads;
constexpr int kGridReplicas = 32;       // one segment: blocks in all
constexpr int kGridClusterBlocks = 64;  // clusters of up to 8: blocks in all (16 of 4, 8 of 8)
constexpr int kGridBigCluster = 16;     // the non-portable cluster size
// Clusters of 16: replicas, at most as many as the device holds at once (the H200: 7). Lab: 6
// against 4 equal at T <= 512, 0.2-0.8 us faster from T = 1024 to 4096 (before clusters of 8
// took T <= 2048; at T = 3072-4096 4 replicas were again 0.5-0.9 us slower); 7 against 6,
// same run, plans back to back: T = 3072 / 4096 / 6144 -0.08 / -0.03 / -0.07 us uniform, -0.05
// / -0.03 / -0.08 Zipf, behind the router top-k -0.01 to -0.11 (bench/plan_cuda_notes.md,
// session 14).
constexpr int kGridBigClusterReplicas = 7;
constexpr int kGridClusterChunks = 5;   // clusters of 8: chunks per warp at most
constexpr int kGridBigClusterChunks = kGridMaxChunks;  // clusters of 16: chunks per warp
constexpr int kGridForceGrid = kGridMaxClusterSegments + 1;  // grid_cluster knob: grid shape
int g_single_max_entries = kSingleMaxEntries;
int g_chunks = 0;          // portable two-kernel path: chunks per warp (0 = automatic)
int g_single_blocks = 0;   // portable one-kernel path: blocks sharing the writes (0 = automatic)
int g_pdl = 1;             // programmatic dependent launch (sm_90+) of the portable two-kernel
                           // path's second kernel and of the grid kernel's cluster shape
int g_grid_max = 1 << 30;  // the grid kernel up to this n (where it fits; 0: never)
int g_grid_replicas = 0;   // grid kernel, cluster shape: replicas (0 = automatic)
int g_grid_chunks = 0;     // grid kernel: chunks per warp (0 = automatic)
int g_grid_cluster = 0;    // grid kernel: 0 automatic, 1..16 the cluster shape with that many
                           // segments, kGridForceGrid the grid shape

using PlanKernel = void (*)(PlanParams);
// One grid kernel per chunk count and id type: [ids_64][C - 1]. Against one kernel per C that
// branched on p.ids_64 (H200, same-run A/B, plans back to back, bit-exact): int32 ids -0.19 to
// -0.32 us at T = 1024-4096 (there now faster than int64, with half the bytes), int64 ids
// within 0.03 (bench/plan_cuda_notes.md, session 20).
template <typename Id>
constexpr PlanKernel kGridKernelsFor[kGridMaxChunks] = {
    plan_grid_kernel<1, Id>, plan_grid_kernel<2, Id>, plan_grid_kernel<3, Id>,
    plan_grid_kernel<4, Id>, plan_grid_kernel<5, Id>, plan_grid_kernel<6, Id>,
    plan_grid_kernel<7, Id>, plan_grid_kernel<8, Id>};
constexpr const PlanKernel* kGridKernels[2] = {kGridKernelsFor<int32_t>, kGridKernelsFor<int64_t>};

// Dynamic shared memory above the default 48 KiB (static included) needs an opt-in per kernel
// and device; granted sizes are remembered so the call is made once, not on every launch.
template <auto kKernel>
void allow_smem(size_t bytes) {
  constexpr size_t kStaticMargin = 8 * 1024;  // the kernels' static shared memory is below this
  static int granted[64] = {};
  if (bytes + kStaticMargin <= 48 * 1024) return;
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && granted[dev] >= static_cast<int>(bytes)) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  if (dev < 64) granted[dev] = static_cast<int>(bytes);
}

// Launch a plan kernel with n_attrs launch attributes (none: a plain launch).
void launch_plan_kernel(void (*kernel)(PlanParams), const PlanParams& p, int blocks, int threads,
                        size_t smem, cudaStream_t s, cudaLaunchAttribute* attrs, int n_attrs) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attrs;
  cfg.numAttrs = n_attrs;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  ARGON_CUDA_CHECK_LAUNCH();
}

// The cluster shape runs one block per SM: each block asks for more than half of an SM's
// shared memory (this much at least, dynamic), so that no SM takes two. Launched early behind
// another kernel (dependent launch), the blocks of a cluster otherwise went two to an SM where
// the earlier kernel left room, and the plan ran on half the SMs (with C <= 4, 64 registers or
// fewer, two blocks fit). H200, same-run A/B, bit-exact: behind the router top-k -1.35 to
// -1.54 us at T = 512, 1024 and 3072, +0.14 / -0.04 (uniform / Zipf) at 4096, within 0.05
// elsewhere; plans back to back -0.28 to -0.59 at T = 128-1024, +0.08 / +0.09 at 3072, where the
// next plan's early start had overlapped the last one's, within 0.09 elsewhere
// (bench/plan_cuda_notes.md, session 18).
size_t one_block_per_sm_smem(const cudaDeviceProp& props, size_t static_bytes) {
  return props.sharedMemPerMultiprocessor / 2 + 1 - props.reservedSharedMemPerBlock -
         static_bytes;
}

// What the device offers the grid kernel, found once per device (for the most shared memory
// the kernel may ask for within what the device allows, which also opts every instantiation
// in to it): the dynamic shared memory a block may have, the blocks it holds at once with
// cooperative launch (0: none), whether it is sm_90+ with the kernels compiled for sm_90+
// (griddepcontrol: programmatic dependent launch), whether it runs clusters of up to 8 blocks,
// and how many clusters of kGridBigCluster blocks it holds at once (0: it runs none).
struct GridDevice {
  size_t smem_room = 0;  // dynamic shared memory a block of the grid kernel may have here
  size_t alone_smem = 0;  // the cluster shape's least dynamic shared memory: one block per SM
  // The dynamic shared memory a launch of `cluster` segments (0: the grid shape) asks for, where
  // its layout needs `need` bytes.
  size_t launch_smem(size_t need, int cluster) const {
    return cluster > 0 ? std::max(need, alone_smem) : need;
  }
  int resident_blocks = 0;
  bool sm90_code = false;
  bool clusters = false;
  int big_clusters = 0;
};

// Clusters of `size` blocks of `kernel` with `smem` bytes of dynamic shared memory each that
// the device holds at once (0 if none, or if it refuses the query: an answer, not an error to
// leave pending).
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
GridDevice grid_device(const cudaDeviceProp& props) {
  static GridDevice known[64];
  static bool asked[64] = {};
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && asked[dev]) return known[dev];
  GridDevice d;
  // The widest plan needs ~72 KB (E = 1022, C = 8): more than a block has without opting in
  // (48 KB) and than sm_75 blocks may have (64 KB). Opt in to what the device allows; the
  // launcher gives plans that need more to the portable kernels.
  // The two id types' kernels have the same static shared memory; the residency queries below
  // take the fewer blocks or clusters of the two widest.
  const PlanKernel widest[2] = {kGridKernels[0][kGridMaxChunks - 1],
                                kGridKernels[1][kGridMaxChunks - 1]};
  const auto fewer = [&](auto held) { return std::min(held(widest[0]), held(widest[1])); };
  cudaFuncAttributes compiled{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&compiled, widest[1]));
  d.smem_room = props.sharedMemPerBlockOptin - compiled.sharedSizeBytes;
  d.alone_smem = std::min(one_block_per_sm_smem(props, compiled.sharedSizeBytes), d.smem_room);
  for (const PlanKernel* kernels : kGridKernels) {
    for (int c = 1; c <= kGridMaxChunks; ++c) {
      const size_t bytes = std::min(
          d.launch_smem(plan_grid_smem_bytes(kGridMaxExperts, c, kGridMaxClusterSegments),
                        kGridMaxClusterSegments),
          d.smem_room);
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernels[c - 1],
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
    }
  }
  // Residency and clusters at the most any plan of that shape may ask for: a smaller plan fits
  // as well.
  const auto widest_smem = [&](int cluster) {
    return std::min(
        d.launch_smem(plan_grid_smem_bytes(kGridMaxExperts, kGridMaxChunks, cluster), cluster),
        d.smem_room);
  };
  const size_t smem = widest_smem(0);
  int coop = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  const int per_sm = fewer([&](PlanKernel kernel) {
    int blocks = 0;
    C10_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kGridThreads, smem));
    return blocks;
  });
  d.resident_blocks = coop ? per_sm * props.multiProcessorCount : 0;
  // Clusters need an sm_90+ device and a kernel compiled for it (one JIT-compiled from older
  // PTX has no cluster code).
  if (props.major >= 9 && compiled.ptxVersion >= 90) {
    d.sm90_code = true;
    const auto clusters_held = [&](int size) {
      return fewer([&](PlanKernel kernel) {
        return active_clusters(kernel, widest_smem(size), size);
      });
    };
    d.clusters = clusters_held(8) >= 1;
    // Clusters above 8 blocks need the kernels' opt-in; a device that refuses it runs none.
    bool big = d.clusters;
    for (const PlanKernel* kernels : kGridKernels) {
      for (int c = 1; c <= kGridMaxChunks && big; ++c) {
        big = cudaFuncSetAttribute(kernels[c - 1], cudaFuncAttributeNonPortableClusterSizeAllowed,
                                   1) == cudaSuccess;
      }
    }
    if (!big) (void)cudaGetLastError();
    d.big_clusters = big ? clusters_held(kGridBigCluster) : 0;
  }
  if (dev < 64) {
    known[dev] = d;
    asked[dev] = true;
  }
  return d;
}

// The grid kernel's shape for a plan: `cluster` segments per cluster (0: the grid shape),
// C chunks per warp, `blocks` blocks; false if the plan does not fit it.
struct GridShape {
  int cluster = 0, chunks = 0, blocks = 0;
};
bool grid_shape(int64_t n, const cudaDeviceProp& props, const GridDevice& dev,
                GridShape& shape) {
  n = std::max<int64_t>(n, 1);
  int cluster = g_grid_cluster;
  if (cluster == 0) {  // automatic
    // Clusters of k segments with up to `chunks` per warp hold k * kGridThreads * chunks.
    const auto clusters_hold = [&](int64_t k, int64_t chunks) {
      return dev.clusters && (k <= 8 || dev.big_clusters > 0) &&
             n <= k * kGridThreads * chunks;
    };
    cluster = n <= kGridOneSegmentEntries                             ? 1
              : clusters_hold(4, 1)                                   ? 4
              : clusters_hold(8, kGridClusterChunks)                  ? 8
              : clusters_hold(kGridBigCluster, kGridBigClusterChunks) ? kGridBigCluster
                                                                      : kGridForceGrid;
    if (cluster == kGridForceGrid && dev.resident_blocks == 0) cluster = 1;
  }
  if (cluster == kGridForceGrid) {
    const int64_t max_segments = std::min(dev.resident_blocks, kGridMaxBlocks);
    if (max_segments == 0) return false;
    const int64_t chunks = g_grid_chunks > 0 ? g_grid_chunks
                                             : ceil_div(n, int64_t{kGridThreads} * max_segments);
    if (chunks > kGridMaxChunks) return false;
    const int64_t segments = ceil_div(n, kGridThreads * chunks);
    if (segments > max_segments) return false;
    shape = {0, static_cast<int>(chunks), static_cast<int>(segments)};
    return true;
  }
  if (cluster > 1 && !dev.clusters) return false;
  if (cluster > 8 && dev.big_clusters == 0) return false;
  const int64_t chunks =
      g_grid_chunks > 0 ? g_grid_chunks : ceil_div(n, int64_t{kGridThreads} * cluster);
  if (chunks > kGridMaxChunks || n > int64_t{kGridThreads} * chunks * cluster) return false;
  const int replicas = g_grid_replicas > 0 ? g_grid_replicas
                       : cluster == 1      ? kGridReplicas
                       : cluster <= 8      ? kGridClusterBlocks / cluster
                                           : std::min(kGridBigClusterReplicas, dev.big_clusters);
  shape = {cluster, static_cast<int>(chunks),
           std::min(replicas, std::max(1, props.multiProcessorCount / cluster)) * cluster};
  return true;
}

// Launch the grid kernel if the plan fits it (returns false, launching nothing, if not).
bool launch_plan_grid(PlanParams& p, const cudaDeviceProp& props, const at::Device& device,
                      cudaStream_t s) {
  if (p.n > g_grid_max || p.E > kGridMaxExperts) return false;
  const GridDevice dev = grid_device(props);
  GridShape shape;
  if (!grid_shape(p.n, props, dev, shape)) return false;
  const size_t need = plan_grid_smem_bytes(p.E, shape.chunks, shape.cluster);
  if (need > dev.smem_room) return false;
  const size_t smem = dev.launch_smem(need, shape.cluster);
  p.cluster = shape.cluster;
  Tensor workspace;  // kept alive until the launch is queued (the allocator is stream-ordered)
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
  // The cluster shape (not the cooperative grid shape, whose blocks must all be resident at
  // once) may start while the previous kernel of the stream ends, if that kernel lets it (a
  // plan kernel, the Triton router top-k): its launch and its shared memory zeroing overlap
  // that kernel. It waits for it before touching global memory. H200: 0.7-1.1 us faster behind
  // such a kernel (T = 1 to 4096); 0.1-0.2 us slower behind one that does not let it, whether
  // it zeroes before or after the wait (bench_cuda.py plan_after_* records). Two blocks to an
  // SM, which an early start allowed, had made it 0.4-0.9 us slower than a plain launch behind
  // the router top-k at T = 512, 1024 and 3072 (one_block_per_sm_smem says why no longer).
  p.pdl = g_pdl && shape.cluster > 0 && dev.sm90_code;
  if (p.pdl) {
    attrs[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n_attrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  launch_plan_kernel(kGridKernels[p.ids_64 ? 1 : 0][shape.chunks - 1], p, shape.blocks,
                     kGridThreads, smem, s, attrs, n_attrs);
  return true;
}

// Launch the plan into outputs of the checked shapes (the workspace, if the two-kernel path
// needs one, is allocated here).
void launch_plan(const PlanDims& d, const Tensor& ids, const Tensor& w, const Tensor& counts,
                 const Tensor& offsets, const Tensor& sorted_token, const Tensor& sorted_weight,
                 const Tensor& pos, const Tensor& tile_expert, const Tensor& meta) {
  const int E = static_cast<int>(d.E);
  const auto* props = at::cuda::getCurrentDeviceProperties();
  const size_t max_block = size_t(kMultiThreads) * kMaxChunks;
  const int64_t e_limit = std::min<int64_t>(
      (1 << 16) - 1,
      (int64_t(props->sharedMemPerBlockOptin) - int64_t(plan_smem_bytes(0, max_block))) /
          int64_t(plan_smem_bytes(1, 0) - plan_smem_bytes(0, 0)));
  TORCH_CHECK(E <= e_limit, "moe_plan on CUDA supports n_expert up to ", e_limit,
              " on this device, got ", E);
  PlanParams p{};
  p.ids = ids.const_data_ptr();
  p.ids_64 = ids.scalar_type() == at::kLong;
  p.weights = w.const_data_ptr();
  p.w_kind = float_kind(w.scalar_type());
  p.n = static_cast<int>(d.entries());
  p.K = static_cast<int>(d.K);
  p.E = E;
  p.tm = static_cast<int>(d.tile_m);
  p.r_max = static_cast<int>(d.r_max);
  p.n_tiles = static_cast<int>(d.n_tiles);
  const int key_bits = 32 - __builtin_clz(static_cast<unsigned>(E));  // keys lie in [0, E]
  p.passes = (key_bits + kDigitBits - 1) / kDigitBits;
  p.digit_bits = (key_bits + p.passes - 1) / p.passes;
  p.counts = counts.data_ptr<int>();
  p.offsets = offsets.data_ptr<int>();
  p.sorted_token = sorted_token.data_ptr<int>();
  p.sorted_weight = sorted_weight.data_ptr<float>();
  p.pos = pos.data_ptr<int>();
  p.tile_expert = tile_expert.data_ptr<int>();
  p.meta = meta.data_ptr<int>();
  const cudaStream_t s = stream();
  if (launch_plan_grid(p, *props, ids.device(), s)) return;

  if (p.n <= std::min(g_single_max_entries, kSingleThreads * kMaxChunks)) {
    // One kernel; every block computes the whole plan, so more blocks only split the writes
    // (about 16 experts' padding and tiles per warp of 8 warps: ~E / 128 blocks).
    constexpr auto kernel = plan_kernel<kSingleThreads, false>;
    p.chunks = std::max<int>(1, static_cast<int>(ceil_div(p.n, kSingleThreads)));
    const int blocks = g_single_blocks > 0
                           ? g_single_blocks
                           : static_cast<int>(std::clamp<int64_t>(ceil_div(E, 16), 1, 32));
    const size_t smem = plan_smem_bytes(E, kSingleThreads * p.chunks);
    allow_smem<kernel>(smem);
    kernel<<<blocks, kSingleThreads, smem, s>>>(p);
    ARGON_CUDA_CHECK_LAUNCH();
    return;
  }
  // Two kernels over segments of kMultiThreads * C entries, about kTargetSegments of them.
  const int auto_chunks =
      static_cast<int>(ceil_div(p.n, int64_t{kMultiThreads} * kTargetSegments));
  p.chunks = std::clamp(g_chunks > 0 ? g_chunks : auto_chunks, 1, kMaxChunks);
  const int n_blocks = static_cast<int>(ceil_div(p.n, int64_t{kMultiThreads} * p.chunks));
  const Tensor workspace = at::detail::empty_cuda({int64_t{n_blocks} * (E + 1)}, at::kInt,
                                                  ids.device(), std::nullopt);
  p.block_hist = workspace.data_ptr<int>();
  p.block_bad = p.block_hist + int64_t{n_blocks} * E;
  constexpr auto count = plan_count_kernel<kMultiThreads>;
  const size_t count_smem = size_t(E) * sizeof(int);
  allow_smem<count>(count_smem);
  count<<<n_blocks, kMultiThreads, count_smem, s>>>(p);
  ARGON_CUDA_CHECK_LAUNCH();
  constexpr auto place = plan_kernel<kMultiThreads, true>;
  const size_t smem = plan_smem_bytes(E, kMultiThreads * p.chunks);
  allow_smem<place>(smem);
  // With dependent launch (sm_90+) it may start while the count kernel runs: it waits
  // (griddepcontrol.wait) before reading the counts. Captured into CUDA graphs as a
  // programmatic edge.
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  // Only with sm_90 code on an sm_90+ device: a kernel JIT-compiled from older PTX has no
  // griddepcontrol.wait and would not wait for the counts.
  const bool pdl = g_pdl && grid_device(*props).sm90_code;
  launch_plan_kernel(place, p, n_blocks, kMultiThreads, smem, s, &attr, pdl ? 1 : 0);
}

void moe_plan_out_cuda(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                       int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                       const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                       const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, topk_weights, counts, offsets, sorted_token, sorted_weight, pos, tile_expert,
                     meta);
  const c10::cuda::CUDAGuard guard(topk_ids.device());
  launch_plan(d, topk_ids.contiguous(), topk_weights.contiguous(), counts, offsets, sorted_token,
              sorted_weight, pos, tile_expert, meta);
}

// The functional form, registered for CUDA to cut eager overhead: its seven outputs come
// straight from the CUDA allocator (at::detail::empty_cuda, no dispatcher round trip each; one
// shared allocation would make the outputs alias, which the schema does not declare) and the
// kernels are launched directly. Sized by make_plan_outputs, as the composite form in
// functional.cpp.
PlanOutputs moe_plan_cuda(
    const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert, int64_t tile_m) {
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

// Benchmark and test hook. Portable kernels: the entries up to which the one-kernel path runs,
// the chunks per warp of the two-kernel path (0: automatic), the blocks of the one-kernel path
// (0: automatic), programmatic dependent launch of the two-kernel path's second kernel and of
// the grid kernel's cluster shape (0 / 1). Grid kernel:
// the entries up to which it is used (where it fits; 0: never), its replicas in the cluster
// shape (0: automatic), its chunks per warp (0: automatic; at most kGridMaxChunks), its shape
// (0: automatic; 1 to kGridMaxClusterSegments: the cluster shape with that many segments, 1
// being one segment, above 8 only where the device runs such clusters; kGridForceGrid: the grid
// shape). Negative values leave a knob as is. Returns the previous values, in this order.
std::vector<int64_t> plan_tuning(int64_t single_max_entries, int64_t chunks, int64_t single_blocks,
                                 int64_t pdl, int64_t grid, int64_t grid_replicas,
                                 int64_t grid_chunks, int64_t grid_cluster) {
  std::vector<int64_t> previous{g_single_max_entries, g_chunks,        g_single_blocks,
                                g_pdl,                g_grid_max,      g_grid_replicas,
                                g_grid_chunks,        g_grid_cluster};
  // Checked before any knob changes, so a refused call changes nothing.
  TORCH_CHECK(grid_chunks <= kGridMaxChunks,
              "plan_tuning: grid_chunks must be at most ", kGridMaxChunks, ", got ", grid_chunks);
  TORCH_CHECK(grid_cluster <= kGridForceGrid, "plan_tuning: grid_cluster must be at most ",
              kGridForceGrid, " (the grid shape), got ", grid_cluster);
  if (single_max_entries >= 0) g_single_max_entries = static_cast<int>(std::min<int64_t>(single_max_entries, 1 << 30));
  if (chunks >= 0) g_chunks = static_cast<int>(std::min<int64_t>(chunks, kMaxChunks));
  if (single_blocks >= 0) g_single_blocks = static_cast<int>(std::min<int64_t>(single_blocks, 1024));
  if (pdl >= 0) g_pdl = pdl != 0;
  if (grid >= 0) g_grid_max = static_cast<int>(std::min<int64_t>(grid, 1 << 30));
  if (grid_replicas >= 0) g_grid_replicas = static_cast<int>(std::min<int64_t>(grid_replicas, 1024));
  if (grid_chunks >= 0) g_grid_chunks = static_cast<int>(grid_chunks);
  if (grid_cluster >= 0) g_grid_cluster = static_cast<int>(grid_cluster);
  return previous;
}

// Test hook: what grid_device found on the current device: [resident blocks under cooperative
// launch, clusters of up to 8 (0 / 1), clusters of kGridBigCluster held at once, the dynamic
// shared memory a block of the grid kernel may have (bytes), the most blocks of the cluster
// shape an SM holds at once (any C, at the least shared memory a launch of it asks for: one
// expert, two segments)].
std::vector<int64_t> plan_grid_device() {
  const GridDevice d = grid_device(*at::cuda::getCurrentDeviceProperties());
  int cluster_blocks_per_sm = 0;
  for (const PlanKernel* kernels : kGridKernels) {
    for (int c = 1; c <= kGridMaxChunks; ++c) {
      const size_t smem = d.launch_smem(plan_grid_smem_bytes(1, c, 2), 2);
      int per_sm = 0;
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels[c - 1],
                                                                   kGridThreads, smem));
      cluster_blocks_per_sm = std::max(cluster_blocks_per_sm, per_sm);
    }
  }
  return {d.resident_blocks, d.clusters ? 1 : 0, d.big_clusters,
          static_cast<int64_t>(d.smem_room), cluster_blocks_per_sm};
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_plan_out", TORCH_FN(moe_plan_out_cuda));
  m.impl("moe_plan", TORCH_FN(moe_plan_cuda));
}

// Internal knobs of the CUDA backend, for the benchmark and tests (not part of the public API).
TORCH_LIBRARY(argon_cuda, m) {
  m.def("plan_tuning(int single_max_entries, int chunks, int single_blocks=-1, int pdl=-1, "
        "int grid_max_entries=-1, int grid_replicas=-1, int grid_chunks=-1, "
        "int grid_cluster=-1) -> int[]",
        TORCH_FN(plan_tuning));
  m.def("plan_grid_device() -> int[]", TORCH_FN(plan_grid_device));
}

}  // namespace argon::cuda
