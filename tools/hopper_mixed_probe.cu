// Host-side probe of the mixed-input GEMM's register partitions, the premises of its
// conversion (csrc/hopper/hopper_mixed_convert.cuh), for both code widths:
// - K block kb of a consumer thread's A fragment holds k in [16 kb, 16 kb + 16), so that kb / 2
//   is the 32-value group of the 64-wide K tile;
// - the scale fragment has stride 0 along K (one register per row, read by every K block);
// - CodesAtom is the formula torch_argon/quant/mixed_repack.py writes, and a thread's 8 codes
//   of a K block sit at 8 adjacent places of the shared-memory tile, value v = v0 + 2 v1 + 4 v2
//   at place 4 v0 + v1 + 2 v2 (the kernel also asserts the register order at compile time).
// Runs on the host, no GPU needed; prints "ok" or what differs:
//
//   C=$ARGON_CUTLASS_DIR; nvcc -std=c++17 --expt-relaxed-constexpr \
//     -gencode=arch=compute_90a,code=sm_90a -I$C/include -I$C/tools/util/include \
//     -Itorch_argon/csrc tools/hopper_mixed_probe.cu -o /tmp/probe && /tmp/probe
//
// 2026-12-06 (CUTLASS 4.2.0): partition_A ((_2,_2,_2),_1,_4):((_1@1,_8@0,_8@1),_0,_16@1); the
// shared-memory tile of codes ((_8,_2,_8),(_8,_2,_4),stages):((_32,_1,_256),(_4,_2,_2048),8192);
// the codes' register fragment ((_2,_2,_2),_1,_4):((_4,_1,_2),_0,_8); the scale fragment
// ((_2,_2,_2),_1,_1):((_0,_1,_0),_0,_0); 9 stages (4-bit), 8 (8-bit). CodesAtom equals
// CUTLASS's compute_memory_reordering_atom<bfloat16_t, Layout<Shape<_1,_1>>,
// Layout<Shape<_2,_4>,Stride<_4,_1>>>() at all 256 places (checked once with its header, which
// needs curand's headers).
#include <cstdio>
#include "hopper/hopper_mixed_gemm.cuh"
using namespace cute;

int bad = 0;
void expect(bool ok, const char* what, int a, int b, int c) {
  if (!ok && bad++ < 10) printf("differs: %s (%d, %d, %d)\n", what, a, b, c);
}

template <class Narrow, int Tile>
void probe(const char* name) {
  using G = argon_hopper_mixed::MixedGemm<Narrow, Tile>;
  using M = typename G::CollectiveMainloop;
  typename M::TiledMma mma;
  printf("%s: stages %d, smem A ", name, int(M::DispatchPolicy::Stages));
  print(typename M::SmemLayoutA{});
  printf("\n");
  Tensor id = make_identity_tensor(make_shape(Int<128>{}, Int<64>{}));
  Tensor sA = make_tensor(make_smem_ptr((Narrow*)nullptr), typename M::SmemLayoutA{});
  for (int thr = 0; thr < 256; ++thr) {
    auto slice = mma.get_thread_slice(thr);
    Tensor part = slice.partition_A(id);                    // (MMA, MMA_M, MMA_K): (m, k)
    Tensor tCsA = slice.partition_A(sA);                    // the same values' smem places
    auto base = typename M::SmemLayoutA{}(get<0>(part(0, 0, 0)), get<1>(part(0, 0, 0)), 0);
    for (int kb = 0; kb < size<2>(part); ++kb)
      for (int v = 0; v < 8; ++v) {
        auto mk = part(v, 0, kb);
        int m = get<0>(mk), k = get<1>(mk);
        expect(k / 16 == kb, "K block", thr, kb, v);
        int place = int(typename M::SmemLayoutA{}(m, k, 0));
        int want = int(base) + 2048 * kb + 4 * (v % 2) + (v / 2) % 2 + 2 * (v / 4);
        expect(place == want, "code place", thr, kb, v);
        // the repack's formula within the tile (m-block stride 256, k-block 256 * 8)
        int formula = 32 * (m % 8) + 8 * ((k % 8) / 2) + 4 * (k % 2) + 2 * ((k % 16) / 8) +
                      (m % 16) / 8 + 256 * (m / 16) + 2048 * (k / 16);
        expect(place == formula, "repack formula", m, k, place);
        expect(int(tCsA.layout()(v, 0, kb, 0)) + int(base) == place, "partition", thr, kb, v);
      }
  }
  auto slice = mma.get_thread_slice(0);
  Tensor sS = make_tensor(make_gmem_ptr((uint32_t*)nullptr), typename M::SmemLayoutScale{});
  print("  scale fragment ");
  print(slice.partition_fragment_A(sS(_, _, Int<0>{})).layout());
  printf("\n");
}

int main() {
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 16; ++k)
      expect(argon_hopper_mixed::CodesAtom{}(m, k) ==
                 32 * (m % 8) + 8 * ((k % 8) / 2) + 4 * (k % 2) + 2 * (k / 8) + m / 8,
             "CodesAtom", m, k, 0);
  probe<cutlass::uint4b_t, 128>("4-bit codes, token tile 128");
  probe<uint8_t, 128>("8-bit codes, token tile 128");
  probe<cutlass::uint4b_t, 64>("4-bit codes, token tile 64");
  probe<uint8_t, 64>("8-bit codes, token tile 64");
  printf(bad ? "%d differences\n" : "ok\n", bad);
  return bad != 0;
}
