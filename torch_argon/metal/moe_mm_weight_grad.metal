// moe_mm_weight_grad: the gradient of moe_mm's weights, out[e][n][k] = sum over the rows r of
// tiles j with tile_expert[j] == e of grad_out[r][n] * xs[r][k], in fp32, rounded once; experts
// with no tile get zeros.
// Launch: grid (ceil(Kd / 256), N, E) threadgroups of 256 threads, one output element per
// thread. Each thread walks the tiles in ascending order and the rows of its expert's tiles in
// ascending order: a fixed summation order, no atomics, so the bytes are the same run to run.
// Reads of xs are coalesced along Kd; grad_out[r][n] is one value per threadgroup and row.
// Limits: a correctness-first kernel (no threadgroup tiling; every thread reads tile_expert
// whole), E, N < 2^32 grid rows; a tiled version is the step after this one.
#include "argon_common.h"
#include "shared/moe_mm_params.h"

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp contract(off)
#endif

kernel void moe_mm_weight_grad(device const uchar* xs [[buffer(0)]],
                               device const uchar* grad_out [[buffer(1)]],
                               device const int* tile_expert [[buffer(2)]],
                               device uchar* out [[buffer(3)]],
                               constant ArgonMoeMmWeightGradParams& p [[buffer(4)]],
                               uint3 tg [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]]) {
  const uint k = tg.x * ARGON_ELEMWISE_THREADS + tid, n = tg.y, e = tg.z;
  if (k >= p.kd) return;
  const uint n_tiles = p.rows / p.tile_m;
  float acc = 0.0f;
  for (uint j = 0; j < n_tiles; ++j) {
    if (tile_expert[j] != int(e)) continue;
    for (uint r = j * p.tile_m; r < (j + 1) * p.tile_m; ++r) {
      const float prod = load_f(grad_out, p.dtype, ulong(r) * p.n + n) *
                         load_f(xs, p.dtype, ulong(r) * p.kd + k);
      acc = acc + prod;
    }
  }
  store_f(out, p.dtype, (ulong(e) * p.n + n) * p.kd + k, acc);
}
