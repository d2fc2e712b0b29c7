// Host-side probe of the mixed-input GEMM's register partitions, the premise of its
// conversion (csrc/hopper/hopper_mixed_convert.cuh): which K values each K block of a
// consumer thread's A fragment holds (block kb must hold k in [16 kb, 16 kb + 16), so that kb / 2
// is the 32-value group of the 64-wide K tile), and the scale fragment's layout (stride 0 along
// K: one register per row, read by every K block). Runs on the host, no GPU needed:
//
//   C=$ARGON_CUTLASS_DIR; nvcc -std=c++17 --expt-relaxed-constexpr \
//     -gencode=arch=compute_90a,code=sm_90a -I$C/include -I$C/tools/util/include \
//     -Itorch_argon/csrc tools/hopper_mixed_probe.cu -o /tmp/probe && /tmp/probe
//
// 2026-12-06 (CUTLASS 4.2.0): partition_A ((_2,_2,_2),_1,_4):((_1@1,_8@0,_8@1),_0,_16@1), K block
// kb of every thread in [16 kb, 16 kb + 15]; the scale fragment ((_2,_2,_2),_1,_1):((_0,_1,_0),
// _0,_0); 9 stages.
#include <cstdio>
#include "hopper/hopper_mixed_gemm.cuh"
using namespace cute;
int main() {
  using G = argon_hopper_mixed::MixedGemm<cutlass::uint4b_t>;  // uint8_t: the 8-bit codes
  using M = G::CollectiveMainloop;
  using TiledMma = M::TiledMma;
  TiledMma mma;
  printf("stages %d\n", int(M::DispatchPolicy::Stages));
  for (int thr : {0, 1, 4, 37, 127, 128, 200}) {
    auto slice = mma.get_thread_slice(thr);
    Tensor id = make_identity_tensor(make_shape(Int<128>{}, Int<64>{}));
    Tensor part = slice.partition_A(id);  // (MMA, MMA_M, MMA_K) of (m, k) coordinates
    if (thr == 0) { print("partition_A shape "); print(part.layout()); print("\n"); }
    printf("thr %3d:", thr);
    for (int kb = 0; kb < size<2>(part); ++kb) {
      int kmin = 1 << 30, kmax = -1;
      for (int v = 0; v < size<0>(part); ++v)
        for (int m = 0; m < size<1>(part); ++m) {
          int k = get<1>(part(v, m, kb));
          kmin = k < kmin ? k : kmin; kmax = k > kmax ? k : kmax;
        }
      printf("  kb%d k[%d..%d]", kb, kmin, kmax);
    }
    printf("\n");
  }
  using SL = M::SmemLayoutScale;
  print("SmemLayoutScale "); print(SL{}); print("\n");
  auto slice = mma.get_thread_slice(0);
  Tensor sS = make_tensor(make_gmem_ptr((uint32_t*)nullptr), SL{});
  Tensor tCsS = slice.partition_A(sS);
  print("tCsS "); print(tCsS.layout()); print("\n");
  print("frag "); print(slice.partition_fragment_A(sS(_, _, Int<0>{})).layout()); print("\n");
  return 0;
}
