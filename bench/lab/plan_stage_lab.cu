// Step clocks of the grid plan kernel, alone (not shipped; bench/lab/stage_lab.sh builds and
// runs it). It includes plan_grid_stages.cuh: plan_grid.cuh with clock64 hooks at its step
// boundaries (stage_copy.py), optionally first changed by make_variant.py (ablations). For
// each shape (T, routing, cluster size, replicas, chunks per warp; E = 512, K = 10, tm = 16,
// int64 ids, no dependent launch) it checks every output against a host reference ("ok" /
// "MISMATCH": an ablation that drops stores mismatches on purpose), times the kernel alone
// (graph of 20 launches, median of 30 replays), then prints per step the median over blocks
// of thread 0's cycles (mean of 20 launches) and the span from the first block's entry to
// the last one's exit (globaltimer).
// Steps: loads, counts, h scan, exchange (cluster barrier and sends; where the kernel marks
// its cluster wait, the "exchange" line splits the two), offsets (the ranks and
// the exchange wait, the peers' counts, the scan, the writes of counts / offsets / meta; the
// "sub" line), placement, tiles, the exit's cluster wait.
// Routing: d=0 uniform, d=1 Zipf(1.2), d=2 every token to one expert plus two bad ids.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "plan_grid_stages.cuh"
using namespace argon::cuda;

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      printf("CUDA error %s line %d\n", cudaGetErrorString(e_), __LINE__);         \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

struct Ref {
  std::vector<int> counts, offsets, st, pos, te, meta;
  std::vector<float> sw;
};

Ref reference(const std::vector<int64_t>& ids, const std::vector<float>& w, int T, int K, int E,
              int tm, int r_max, int n_tiles) {
  Ref r;
  const int n = T * K;
  r.counts.assign(E, 0);
  int bad = 0, valid = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t v = ids[i];
    if (v >= 0 && v < E) { r.counts[v]++; valid++; } else if (v != -1) bad++;
  }
  r.offsets.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) r.offsets[e + 1] = r.offsets[e] + (r.counts[e] + tm - 1) / tm * tm;
  r.st.assign(r_max, -1);
  r.sw.assign(r_max, 0.f);
  r.pos.assign(n, -1);
  std::vector<int> fill(E, 0);
  for (int i = 0; i < n; ++i) {
    const int64_t v = ids[i];
    if (v >= 0 && v < E) {
      const int row = r.offsets[v] + fill[v]++;
      r.st[row] = i / K;
      r.sw[row] = w[i];
      r.pos[i] = row;
    }
  }
  r.te.assign(n_tiles, -1);
  for (int e = 0; e < E; ++e)
    for (int j = r.offsets[e] / tm; j < r.offsets[e + 1] / tm; ++j) r.te[j] = e;
  r.meta = {r.offsets[E], r.offsets[E] / tm, valid, bad};
  return r;
}

void make_ids(std::vector<int64_t>& ids, int T, int K, int E, int dist, std::mt19937& rng) {
  ids.resize(size_t(T) * K);
  std::vector<double> pz(E);
  for (int e = 0; e < E; ++e) pz[e] = 1.0 / std::pow(e + 1.0, 1.2);
  std::discrete_distribution<int> zipf(pz.begin(), pz.end());
  std::uniform_int_distribution<int> uni(0, E - 1);
  for (int t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) {
      int v;
      bool dup;
      do {
        v = dist == 0 ? uni(rng) : dist == 1 ? zipf(rng) : (k == 0 ? 3 : -1);
        dup = false;
        for (int j = 0; j < k; ++j) dup |= ids[size_t(t) * K + j] == v && v >= 0;
      } while (dup && dist != 2 && E >= K);
      ids[size_t(t) * K + k] = v;
    }
  }
  if (dist == 2 && T > 2) { ids[5] = E + 7; ids[7] = -9; }  // adversarial: bad ids
}


template <class F>
float graph_us(F fn, cudaStream_t s, int inner = 20, int reps = 30) {
  for (int i = 0; i < 3; ++i) fn();
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < inner; ++i) fn();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < reps + 3; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(ms * 1000.f / inner);
  }
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return t[t.size() / 2];
}



long long* g_host_stage = nullptr;
using Kern = void (*)(PlanParams);
static const Kern kKerns[8] = {plan_grid_kernel<1>, plan_grid_kernel<2>, plan_grid_kernel<3>,
  plan_grid_kernel<4>, plan_grid_kernel<5>, plan_grid_kernel<6>, plan_grid_kernel<7>, plan_grid_kernel<8>};

void run(int T, int dist, int cluster, int replicas, int C) {
  const int K = 10, E = 512, tm = 16, n = T * K;
  const int r_max = ((n + std::min(E, n) * (tm - 1)) + tm - 1) / tm * tm, n_tiles = r_max / tm;
  std::mt19937 rng(7 + T);
  std::vector<int64_t> ids;
  make_ids(ids, T, K, E, dist, rng);
  std::vector<float> w(n);
  for (int i = 0; i < n; ++i) w[i] = float(rng() % 1000) / 997.f;
  const Ref ref = reference(ids, w, T, K, E, tm, r_max, n_tiles);
  int64_t* d_ids; float* d_w; int* o; float* sw; int* ws;
  const size_t nn = std::max(n, 1), rr = std::max(r_max, 1);
  CK(cudaMalloc(&d_ids, nn * 8)); CK(cudaMalloc(&d_w, nn * 4));
  CK(cudaMalloc(&o, (E + E + 1 + rr + nn + rr + 16) * 4)); CK(cudaMalloc(&sw, rr * 4));
  CK(cudaMalloc(&ws, 400 * 1024 * 4));
  CK(cudaMemcpy(d_ids, ids.data(), n * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_w, w.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(o, 0x5a, (E + E + 1 + rr + nn + rr + 16) * 4)); CK(cudaMemset(sw, 0x5a, rr * 4));
  PlanParams p{};
  p.pdl = 0;
  p.ids = d_ids; p.ids_64 = 1; p.weights = d_w; p.w_kind = FloatKind::kF32;
  p.n = n; p.K = K; p.E = E; p.tm = tm; p.r_max = r_max; p.n_tiles = n_tiles; p.cluster = cluster;
  p.counts = o; p.offsets = o + E; p.sorted_token = o + 2 * E + 1; p.pos = p.sorted_token + rr;
  p.tile_expert = p.pos + nn; p.meta = p.tile_expert + rr; p.sorted_weight = sw; p.block_hist = ws;
  Kern kern = kKerns[C - 1];
  const size_t smem = plan_grid_smem_bytes(E, C, cluster);
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (cluster > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kGridThreads); cfg.dynamicSmemBytes = smem;
  int G;
  int max_clusters = -1;
  if (cluster == 0) {
    G = (n + kGridThreads * C - 1) / (kGridThreads * C);
    attr.id = cudaLaunchAttributeCooperative; attr.val.cooperative = 1;
    cfg.attrs = &attr; cfg.numAttrs = 1;
  } else {
    G = cluster * replicas;
    if (cluster > 1) {
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = cluster; attr.val.clusterDim.y = 1; attr.val.clusterDim.z = 1;
      cfg.attrs = &attr; cfg.numAttrs = 1;
      cfg.gridDim = dim3(G);
      CK(cudaOccupancyMaxActiveClusters(&max_clusters, kern, &cfg));
      if (max_clusters < 1) { printf("T=%d k=%d: no cluster fits\n", T, cluster); return; }
    }
  }
  cfg.gridDim = dim3(G);
  cudaStream_t st_;
  CK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
  cfg.stream = st_;
  CK(cudaLaunchKernelEx(&cfg, kern, p));
  CK(cudaDeviceSynchronize());
  bool ok;
  {
    std::vector<int> st(rr), pos(nn), te(n_tiles), cnt(E), off(E + 1), meta(4);
    std::vector<float> swv(rr);
    CK(cudaMemcpy(st.data(), p.sorted_token, r_max * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(swv.data(), sw, r_max * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(pos.data(), p.pos, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(te.data(), p.tile_expert, n_tiles * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cnt.data(), p.counts, E * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(off.data(), p.offsets, (E + 1) * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(meta.data(), p.meta, 16, cudaMemcpyDeviceToHost));
    st.resize(r_max); swv.resize(r_max); pos.resize(n);
    ok = st == ref.st && swv == ref.sw && pos == ref.pos && te == ref.te && cnt == ref.counts &&
         off == ref.offsets && meta == ref.meta;
  }
  const float us = graph_us([&] { CK(cudaLaunchKernelEx(&cfg, kern, p)); }, st_);
  printf("T=%5d d=%d k=%2d R=%2d C=%d G=%3d maxcl=%2d %s %6.2f us\n", T, dist, cluster, replicas, C, G,
         max_clusters, ok ? "ok" : "MISMATCH", us);
  {
  long long* d_st = g_host_stage;
  std::vector<double> acc(9, 0.0), accmax(9, 0.0), sub(5, 0.0), xch(2, 0.0);
  bool has_xch = true;  // slot 9: after the exchange step's cluster wait (cluster shape)
  double span = 0, skew = 0;
  const int runs = 20;
  for (int r = 0; r < runs; ++r) {
    CK(cudaMemset(d_st, 0, G * 16 * 8));
    CK(cudaLaunchKernelEx(&cfg, kern, p));
    CK(cudaDeviceSynchronize());
    std::vector<long long> h(G * 16);
    CK(cudaMemcpy(h.data(), d_st, G * 16 * 8, cudaMemcpyDeviceToHost));
    for (int k = 1; k < 9; ++k) {
      std::vector<long long> d(G);
      for (int b = 0; b < G; ++b) d[b] = h[b * 16 + k] - h[b * 16 + k - 1];
      std::sort(d.begin(), d.end());
      acc[k] += d[G / 2];
      accmax[k] += d[G - 1];
    }
    const int pairs[5][2] = {{4, 12}, {12, 13}, {13, 14}, {14, 15}, {15, 5}};
    for (int q = 0; q < 5; ++q) {
      std::vector<long long> d(G);
      for (int b = 0; b < G; ++b) d[b] = h[b * 16 + pairs[q][1]] - h[b * 16 + pairs[q][0]];
      std::sort(d.begin(), d.end());
      sub[q] += d[G / 2];
    }
    for (int q = 0; q < 2; ++q) {  // the exchange step: up to its cluster wait, then the sends
      std::vector<long long> d(G);
      for (int b = 0; b < G; ++b) {
        has_xch = has_xch && h[b * 16 + 9] != 0;
        d[b] = q == 0 ? h[b * 16 + 9] - h[b * 16 + 3] : h[b * 16 + 4] - h[b * 16 + 9];
      }
      std::sort(d.begin(), d.end());
      xch[q] += d[G / 2];
    }
    long long t0 = h[10], t1 = h[11], s0max = h[10];
    for (int b = 0; b < G; ++b) {  // first entry, last exit, last entry (start skew)
      t0 = std::min(t0, h[b * 16 + 10]);
      t1 = std::max(t1, h[b * 16 + 11]);
      s0max = std::max(s0max, h[b * 16 + 10]);
    }
    span += double(t1 - t0); skew += double(s0max - t0);
  }
  printf("T=%5d d=%d k=%2d R=%2d C=%d G=%3d %s cyc:", T, dist, cluster, replicas, C, G,
         ok ? "ok" : "MISMATCH");
  for (int k = 1; k < 9; ++k) printf(" %5.0f", acc[k] / runs);
  printf(" | span %5.0f ns startskew %4.0f ns\n", span / runs, skew / runs);
  printf("%*s sub: rankadd %5.0f peers %5.0f scan %5.0f writes %5.0f bar %5.0f\n", 40, "",
         sub[0] / runs, sub[1] / runs, sub[2] / runs, sub[3] / runs, sub[4] / runs);
  if (has_xch) {
    printf("%*s exchange: to the cluster wait's end %5.0f, sends %5.0f\n", 40, "",
           xch[0] / runs, xch[1] / runs);
  }
  printf("%*s max:", 47, "");
  for (int k = 1; k < 9; ++k) printf(" %5.0f", accmax[k] / runs);
  printf("\n");
  }
  cudaFree(d_ids); cudaFree(d_w); cudaFree(o); cudaFree(sw); cudaFree(ws);
  CK(cudaStreamDestroy(st_));
}

int main(int argc, char** argv) {
  // Columns: cycles of step 1 loads, 2 ranks / counts, 3 column scan, 4 exchange, 5 offsets,
  // 6 placement, 7 tiles, 8 final cluster wait.
  printf("threads %d; steps: loads ranks hscan exchange offsets place tiles exitwait\n", kGridThreads);
  CK(cudaMalloc(&g_host_stage, 256 * 16 * 8));
  CK(cudaMemcpyToSymbol(g_stage, &g_host_stage, sizeof(g_host_stage)));
  if (argc > 1 && strcmp(argv[1], "shapes") == 0) {  // the launcher's shapes at T = 64-4096
    for (int dist : {0, 1}) {
      run(64, dist, 1, 32, 2);
      run(1024, dist, 8, 8, 3);
      run(2048, dist, 8, 8, 5);
      run(3072, dist, 16, 7, 4);
      run(4096, dist, 16, 7, 5);
    }
    return 0;
  }
  for (int dist : {0, 1}) {
    for (int T : {128, 512, 1024, 2048, 3072, 4096, 6000}) {  // the launcher's shapes
      const int n = 10 * T;
      const int k = n <= 4 * kGridThreads ? 4 : n <= 8 * kGridThreads * 5 ? 8 : 16;
      const int C = (n + k * kGridThreads - 1) / (k * kGridThreads);
      run(T, dist, k, k == 4 ? 16 : k == 8 ? 8 : 7, C);
    }
    run(3000, 2, 16, 7, 4);  // adversarial: one expert, bad ids
    for (int C : {2, 3, 4, 5, 6, 8}) run(1024, dist, 16, 7, C);  // forced chunks per warp
    for (int C : {3, 5, 8}) run(2048, dist, 8, 8, C);
    for (int C : {5, 6, 8}) run(4096, dist, 16, 7, C);  // T = 4096 spread thinner
    run(2560, dist, 16, 7, 4);
  }
  return 0;
}
