// moe_plan on CUDA: the launcher, which picks a kernel, and the op registrations.
//   Tiny plans on sm_90+ (n <= kClusterMaxEntries, decode-sized: T <= 6 at K = 10):
//     plan_cluster_kernel (plan_cluster.cuh), one block of 256 threads. It handles any n up to
//     a 16-block cluster's shared memory, but the H200 sweep (bench_cuda.py plan_variants)
//     has it faster than the portable kernels only there: 5.1 against 6.9 us at T = 1, even at
//     T = 8, slower from T = 16 up (see that file's Status).
//   Otherwise: the portable kernels (plan_portable.cuh): one kernel up to kSingleMaxEntries,
//     count + place kernels above.
// All give the same bytes (the reference's); the CUDA tests run each on the same inputs.
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include <ATen/cuda/EmptyTensor.h>

#include "../checks.h"
#include "../op_signatures.h"
#include "plan_cluster.cuh"
#include "plan_portable.cuh"

namespace argon::cuda {
namespace {

// Tuning knobs, process-wide; set only by the benchmark and tests through plan_tuning.
// Portable one-kernel path up to this n. H200 (plan_variants): at n = 1280 one kernel 10.7-11.7
// us, two 12.1-12.4; at n = 4090 one kernel 22.5-22.8 us, two 11.4-11.9.
constexpr int kSingleMaxEntries = 2048;
// The cluster kernel up to this n: it beats the portable kernels at T <= 4 (K = 10) and ties
// at T = 8 (plan_variants; see the header).
constexpr int kClusterMaxEntries = 64;
int g_single_max_entries = kSingleMaxEntries;
int g_chunks = 0;          // portable two-kernel path: chunks per warp (0 = automatic)
int g_single_blocks = 0;   // portable one-kernel path: blocks sharing the writes (0 = automatic)
int g_pdl = 1;             // portable two-kernel path: programmatic dependent launch (sm_90+)
int g_cluster_max = kClusterMaxEntries;  // the cluster kernel up to this n (where it fits)
int g_cluster_blocks = 0;  // cluster kernel: blocks (0 = automatic)
int g_cluster_threads = 0; // cluster kernel: threads per block (0 = automatic)
int g_cluster_chunks = 0;  // cluster kernel: chunks per warp the automatic block count aims at

// Cluster kernel shape: 256 threads up to 4096 entries (H200, T = 1: 5.1 us, against 5.6 with
// 512 and 7.6 with 1024: fewer warps to zero, scan and synchronise), 1024 above; blocks for
// about 2 chunks per warp, up to the cluster limit (more blocks shorten the chunk loop and
// spread the stores, and add one remote load per expert each).
constexpr int kClusterThreads = 1024;
constexpr int kClusterSmallThreads = 256;
constexpr int kClusterSmallEntries = 4096;
constexpr int kClusterTargetChunks = 2;
constexpr size_t kStaticSmemMargin = 1024;  // the cluster kernel's static shared memory

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

// The launch of a grid that is exactly one cluster of `blocks` blocks (with one block, a plain
// launch: no cluster scheduling). Holds the attribute the config points to, so it is not copied.
struct OneClusterLaunch {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t cfg{};
  OneClusterLaunch(int blocks, int threads, size_t smem, cudaStream_t s) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = blocks;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = blocks > 1 ? 1 : 0;
  }
  OneClusterLaunch(const OneClusterLaunch&) = delete;
  OneClusterLaunch& operator=(const OneClusterLaunch&) = delete;
};

// The largest cluster of plan_cluster_kernel (up to 16 blocks of 1024 threads with the most
// shared memory it may use) this device can run; 0 below sm_90. Found once per device.
int max_cluster_blocks() {
  static int known[64] = {};  // blocks + 1; 0 = not asked yet
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && known[dev]) return known[dev] - 1;
  const auto* props = at::cuda::getCurrentDeviceProperties();
  int best = 0;
  if (props->major >= 9) {
    const int smem = static_cast<int>(props->sharedMemPerBlockOptin - kStaticSmemMargin);
    // Clusters above 8 blocks are "non-portable": allowed where the GPU has room for them.
    bool big = true;
    for (auto kernel : {plan_cluster_kernel<10>, plan_cluster_kernel<16>}) {
      C10_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      big = big && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                        1) == cudaSuccess;
    }
    (void)cudaGetLastError();
    for (int blocks : {kClusterMaxBlocks, 8}) {
      if (blocks > 8 && !big) continue;
      const OneClusterLaunch launch(blocks, kClusterThreads, smem, nullptr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, plan_cluster_kernel<16>, &launch.cfg) ==
              cudaSuccess &&
          clusters >= 1) {
        best = blocks;
        break;
      }
      (void)cudaGetLastError();
    }
  }
  if (dev < 64) known[dev] = best + 1;
  return best;
}

// Launch the cluster kernel if the plan fits it (returns false, launching nothing, if not).
bool launch_plan_cluster(PlanParams& p, const cudaDeviceProp& props, cudaStream_t s) {
  if (p.n > g_cluster_max || p.E + 1 >= (1 << 16)) return false;
  const int max_blocks = max_cluster_blocks();
  if (max_blocks == 0) return false;
  const size_t smem_limit = props.sharedMemPerBlockOptin - kStaticSmemMargin;
  const int target = g_cluster_chunks > 0 ? g_cluster_chunks : kClusterTargetChunks;
  // Threads: 256 for small n, else 1024; halved (down to 128, more chunks each) while the
  // per-warp count tables (4 * (E + 1) bytes per warp) and entries do not fit.
  int threads = 0, blocks = 0, chunks = 0;
  size_t smem = 0;
  const int first_threads = g_cluster_threads > 0 ? g_cluster_threads
                            : p.n <= kClusterSmallEntries ? kClusterSmallThreads : kClusterThreads;
  for (int t = first_threads; t >= 128; t /= 2) {
    threads = t;
    blocks = static_cast<int>(std::clamp<int64_t>(
        g_cluster_blocks > 0 ? g_cluster_blocks : ceil_div(p.n, int64_t{t} * target), 1,
        max_blocks));
    chunks = static_cast<int>(std::max<int64_t>(1, ceil_div(p.n, int64_t{blocks} * t)));
    smem = plan_cluster_smem_bytes(p.E, t, chunks);
    if (smem <= smem_limit || g_cluster_threads > 0) break;
  }
  if (smem > smem_limit) return false;
  p.chunks = chunks;
  const OneClusterLaunch launch(blocks, threads, smem, s);
  const auto kernel = p.E + 1 < (1 << 10) ? plan_cluster_kernel<10> : plan_cluster_kernel<16>;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, p));
  ARGON_CUDA_CHECK_LAUNCH();
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
  if (launch_plan_cluster(p, *props, s)) return;

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
  if (g_pdl && props->major >= 9) {
    // May start while the count kernel runs: it waits (griddepcontrol.wait) before reading
    // the counts. Captured into CUDA graphs as a programmatic edge.
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(n_blocks);
    cfg.blockDim = dim3(kMultiThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, place, p));
  } else {
    place<<<n_blocks, kMultiThreads, smem, s>>>(p);
  }
  ARGON_CUDA_CHECK_LAUNCH();
}

void moe_plan_out_cuda(const Tensor& topk_ids, const Tensor& topk_weights, int64_t n_expert,
                       int64_t tile_m, const Tensor& counts, const Tensor& offsets,
                       const Tensor& sorted_token, const Tensor& sorted_weight, const Tensor& pos,
                       const Tensor& tile_expert, const Tensor& meta) {
  const PlanDims d = check_plan_inputs(topk_ids, topk_weights, n_expert, tile_m);
  check_plan_outputs(d, topk_ids, counts, offsets, sorted_token, sorted_weight, pos, tile_expert,
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
// (0: automatic), programmatic dependent launch of the two-kernel path (0 / 1). Cluster
// kernel: the entries up to which it is used (where it fits; 0: never), its blocks, threads per
// block (a multiple of 128) and target chunks per warp (0: automatic). Negative values leave a
// knob as is. Returns the previous values, in this order.
std::vector<int64_t> plan_tuning(int64_t single_max_entries, int64_t chunks, int64_t single_blocks,
                                 int64_t pdl, int64_t cluster, int64_t cluster_blocks,
                                 int64_t cluster_threads, int64_t cluster_chunks) {
  std::vector<int64_t> previous{g_single_max_entries, g_chunks,         g_single_blocks,
                                g_pdl,                g_cluster_max,    g_cluster_blocks,
                                g_cluster_threads,    g_cluster_chunks};
  // Checked before any knob changes, so a refused call changes nothing.
  TORCH_CHECK(cluster_threads <= 0 || (cluster_threads % 128 == 0 && cluster_threads <= 1024),
              "plan_tuning: cluster_threads must be 0 or a multiple of 128 up to 1024, got ",
              cluster_threads);
  if (single_max_entries >= 0) g_single_max_entries = static_cast<int>(std::min<int64_t>(single_max_entries, 1 << 30));
  if (chunks >= 0) g_chunks = static_cast<int>(std::min<int64_t>(chunks, kMaxChunks));
  if (single_blocks >= 0) g_single_blocks = static_cast<int>(std::min<int64_t>(single_blocks, 1024));
  if (pdl >= 0) g_pdl = pdl != 0;
  if (cluster >= 0) g_cluster_max = static_cast<int>(std::min<int64_t>(cluster, 1 << 30));
  if (cluster_blocks >= 0) g_cluster_blocks = static_cast<int>(std::min<int64_t>(cluster_blocks, kClusterMaxBlocks));
  if (cluster_threads >= 0) g_cluster_threads = static_cast<int>(cluster_threads);
  if (cluster_chunks >= 0) g_cluster_chunks = static_cast<int>(std::min<int64_t>(cluster_chunks, 64));
  return previous;
}

}  // namespace

TORCH_LIBRARY_IMPL(argon, CUDA, m) {
  m.impl("moe_plan_out", TORCH_FN(moe_plan_out_cuda));
  m.impl("moe_plan", TORCH_FN(moe_plan_cuda));
}

// Internal knobs of the CUDA backend, for the benchmark and tests (not part of the public API).
TORCH_LIBRARY(argon_cuda, m) {
  m.def("plan_tuning(int single_max_entries, int chunks, int single_blocks=-1, int pdl=-1, "
        "int cluster_max_entries=-1, int cluster_blocks=-1, int cluster_threads=-1, int cluster_chunks=-1) "
        "-> int[]",
        TORCH_FN(plan_tuning));
}

}  // namespace argon::cuda
