// Host-side probe of the fused gate/up epilogue's premise (csrc/hopper/hopper_padded_act_epilogue.cuh)
// on the tiled MMAs CUTLASS builds for both padded configurations and both dtypes: for every
// consumer thread, accumulator value (v0, r, 2 j) of MMA (mm, nn) sits at a tile column n with
// n % 16 < 8 (a gate column of the interleaved stack), (v0, r, 2 j + 1) at (m, n + 8) (the up
// column of the same h element), (1, r, 2 j) at (m, n + 1) with n even (the pair of adjacent h
// columns one 32-bit store writes); and the gate values of all threads cover every gate column
// of the tile exactly once. Runs on the host, no GPU needed; prints the layouts and "ok" or what
// differs:
//
//   C=$ARGON_CUTLASS_DIR; nvcc -std=c++17 --expt-relaxed-constexpr \
//     -gencode=arch=compute_90a,code=sm_90a -I$C/include -I$C/tools/util/include \
//     -Itorch_argon/csrc tools/hopper_act_probe.cu -o /tmp/act_probe && /tmp/act_probe
#include <cstdio>
#include <vector>

#include "hopper/hopper_padded_gemm.cuh"
using namespace cute;

int bad = 0;
void expect(bool ok, const char* what, int thr, int a, int b) {
  if (!ok && bad++ < 20) printf("differs: %s (thread %d: %d, %d)\n", what, thr, a, b);
}

template <class Element, class Cfg>
void probe(const char* name) {
  using G = argon_hopper_padded::PaddedActGemm<Element, Cfg>;
  using M = typename G::CollectiveMainloop;
  typename M::TiledMma mma;
  constexpr int kTileM = size<0>(typename Cfg::TileShape{});
  constexpr int kTileN = size<1>(typename Cfg::TileShape{});
  const int threads = int(size(mma));
  Tensor id = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
  auto frag = partition_fragment_C(mma, make_shape(Int<kTileM>{}, Int<kTileN>{}));
  printf("%s: %d consumer threads a tile, stages %d, accumulator ", name, threads,
         int(M::DispatchPolicy::Stages));
  print(frag.layout());
  printf("\n");
  constexpr int kBlocks = size<0, 2>(decltype(frag.layout()){});
  constexpr int kMmaM = size<1>(decltype(frag.layout()){});
  constexpr int kMmaN = size<2>(decltype(frag.layout()){});
  std::vector<int> seen(kTileM * kTileN, 0);
  for (int thr = 0; thr < threads; ++thr) {
    Tensor c = mma.get_thread_slice(thr).partition_C(id);
    for (int mm = 0; mm < kMmaM; ++mm)
      for (int nn = 0; nn < kMmaN; ++nn)
        for (int r = 0; r < 2; ++r)
          for (int j = 0; j < kBlocks / 2; ++j) {
            auto g0 = c(make_coord(make_coord(0, r, 2 * j), mm, nn));
            auto g1 = c(make_coord(make_coord(1, r, 2 * j), mm, nn));
            auto u0 = c(make_coord(make_coord(0, r, 2 * j + 1), mm, nn));
            auto u1 = c(make_coord(make_coord(1, r, 2 * j + 1), mm, nn));
            const int m = get<0>(g0), n = get<1>(g0);
            expect(n % 16 < 8 && n % 2 == 0, "gate column", thr, m, n);
            expect(get<0>(g1) == m && get<1>(g1) == n + 1, "pair", thr, m, n);
            expect(get<0>(u0) == m && get<1>(u0) == n + 8, "up of gate", thr, m, n);
            expect(get<0>(u1) == m && get<1>(u1) == n + 9, "up of the pair", thr, m, n);
            ++seen[m * kTileN + n];
            ++seen[m * kTileN + n + 1];
          }
  }
  for (int m = 0; m < kTileM; ++m)
    for (int n = 0; n < kTileN; ++n)
      expect(seen[m * kTileN + n] == (n % 16 < 8 ? 1 : 0), "gate coverage", -1, m, n);
}

int main() {
  probe<cutlass::bfloat16_t, argon_hopper_padded::Pingpong>("bf16 pingpong_128x128");
  probe<cutlass::bfloat16_t, argon_hopper_padded::CooperativeWide>("bf16 cooperative_128x256");
  probe<cutlass::half_t, argon_hopper_padded::Pingpong>("fp16 pingpong_128x128");
  probe<cutlass::half_t, argon_hopper_padded::CooperativeWide>("fp16 cooperative_128x256");
  printf(bad ? "%d differences\n" : "ok\n", bad);
  return bad ? 1 : 0;
}
