// The mixed-input Hopper GEMM (csrc/hopper/hopper_mixed_gemm.h's C entry point) checked and timed
// on a GPU without torch or the extension: a binary of the entry, its units and this file,
// built here with nvcc and carried to a device whose session has no time for the extension's
// build. Checks, for both code widths and both token tiles: every used tile against float64
// (weights u * s + z from the codes, scales and zeros written in the kernel's layout, the
// formula of torch_argon/quant/mixed_repack.py), N clipped by the TMA bounds (N = 208), a tile
// whose expert is out of range written with zeros, the tile past the used count left as it was.
// Then times the gate/up GEMM of E=128 H=2048 I=768 at a few rows per expert for both tiles.
//
//   C=$ARGON_CUTLASS_DIR; S=torch_argon/csrc/hopper; mkdir -p build
//   nvcc -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -I$C/include -I$C/tools/util/include -Itorch_argon/csrc tools/hopper_mixed_standalone.cu \
//     $S/hopper_mixed_entry.cu $S/hopper_mixed_u*_bf16_cooperative_128x*.cu \
//     -o build/mixed_standalone
//   ./build/mixed_standalone    # prints the checks' errors and the timings; exit 1 on a failure
// -DNDEBUG as build_tools/hopper_build.py compiles the units: without it ptxas warned that the
// 4-bit kernels' wgmma are serialized (C7510, a function call inside the wgmma pipeline: the
// device asserts, gone with -DNDEBUG), so the timings would not be the extension's kernels'.
// ~5 min here on 2 cores; 1.4 MB.
// Carried as build/mixed_standalone and run by `bash bench/h200_session.sh standalone`.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "hopper/hopper_mixed_gemm.h"
#include "standalone_cuda.h"

namespace {

using standalone::median_us;
using standalone::sm_count;
using standalone::to_device;

uint16_t bf16_bits(float v) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
double bf16_value(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// The place of value (j, k) of a 16 x 16 block (hopper_mixed_gemm.h).
int block_offset(int j, int k) {
  return 32 * (j % 8) + 8 * ((k % 8) / 2) + 4 * (k % 2) + 2 * ((k % 16) / 8) + (j % 16) / 8;
}

struct Weights {
  int e, n, k, bits;
  std::vector<uint8_t> codes;     // [E, K/16, N/16, 32 * bits]
  std::vector<uint32_t> scales;   // [E, K/64, N]
  std::vector<uint32_t> zeros;
  std::vector<double> w;          // [E, N, K]: u * s + z with s, z as bf16 values

  Weights(int e_, int n_, int k_, int bits_, std::mt19937& rng) : e(e_), n(n_), k(k_), bits(bits_) {
    const int block_bytes = 32 * bits;
    codes.assign(size_t(e) * (k / 16) * (n / 16) * block_bytes, 0);
    scales.assign(size_t(e) * (k / 64) * n, 0);
    zeros.assign(scales.size(), 0);
    w.assign(size_t(e) * n * k, 0.0);
    std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
    std::uniform_real_distribution<float> scale(0.002f, 0.02f), zero(-0.05f, 0.05f);
    for (int ex = 0; ex < e; ++ex)
      for (int j = 0; j < n; ++j)
        for (int t = 0; t < k / 64; ++t) {
          uint16_t s[2], z[2];
          for (int g = 0; g < 2; ++g) {
            s[g] = bf16_bits(scale(rng) * (bits == 8 ? 0.1f : 1.0f));
            z[g] = bf16_bits(zero(rng));
          }
          const size_t at = (size_t(ex) * (k / 64) + t) * n + j;
          scales[at] = s[0] | (uint32_t(s[1]) << 16);
          zeros[at] = z[0] | (uint32_t(z[1]) << 16);
          for (int kk = 64 * t; kk < 64 * t + 64; ++kk) {
            const int u = code(rng), g = (kk % 64) / 32;
            w[(size_t(ex) * n + j) * k + kk] = u * bf16_value(s[g]) + bf16_value(z[g]);
            const size_t block = (size_t(ex) * (k / 16) + kk / 16) * (n / 16) + j / 16;
            const int o = block_offset(j, kk);
            uint8_t* b = &codes[block * block_bytes];
            if (bits == 8)
              b[o] = static_cast<uint8_t>(u);
            else
              b[o / 2] |= static_cast<uint8_t>(u << (4 * (o % 2)));
          }
        }
  }
};

struct Shape {
  int e, n, k, bits;
};

int launch(const Shape& wt, const void* d_codes, const void* d_s, const void* d_z,
           const void* x, void* d, const int32_t* tile_expert, const int32_t* used, int tiles,
           int tile) {
  ArgonHopperMixedGemm g{};
  g.x = x;
  g.codes = d_codes;
  g.scales = d_s;
  g.zeros = d_z;
  g.d = d;
  g.tile_expert = tile_expert;
  g.used_tiles = used;
  g.max_tiles_m = tiles;
  g.n_experts = wt.e;
  g.n = wt.n;
  g.k = wt.k;
  g.code_bits = wt.bits;
  g.tile_rows = tile;
  g.sm_count = sm_count();
  g.stream = nullptr;
  char err[512] = "";
  if (argon_hopper_mixed_gemm(&g, err, sizeof err)) {
    std::printf("launch failed: %s\n", err);
    return 1;
  }
  return 0;
}

// One check: E=5 experts, N=208, K=320; 5 tiles of which 4 used, tile 2's expert out of range.
bool check(int bits, int tile, std::mt19937& rng) {
  const int E = 5, N = 208, K = 320, tiles = 5, used = 4;
  const std::vector<int32_t> tile_expert = {2, 0, 7, 4, 1};
  Weights wt(E, N, K, bits, rng);
  const int rows = tiles * tile;
  std::vector<uint16_t> x(size_t(rows) * K);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  for (auto& v : x) v = bf16_bits(val(rng));
  const uint16_t sentinel = 0x7F7F;  // a large finite bf16: any write shows
  std::vector<uint16_t> d_init(size_t(rows) * N, sentinel);
  uint8_t* d_codes = to_device(wt.codes);
  uint32_t* d_s = to_device(wt.scales);
  uint32_t* d_z = to_device(wt.zeros);
  uint16_t* d_x = to_device(x);
  uint16_t* d_d = to_device(d_init);
  int32_t* d_te = to_device(tile_expert);
  int32_t* d_used = to_device(std::vector<int32_t>{used});
  bool ok = launch(Shape{wt.e, wt.n, wt.k, wt.bits}, d_codes, d_s, d_z, d_x, d_d, d_te, d_used, tiles, tile) == 0;
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> out(d_init.size());
  CHECK_CUDA(cudaMemcpy(out.data(), d_d, out.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int t = 0; t < tiles && ok; ++t) {
    const int ex = tile_expert[t];
    double err2 = 0, ref2 = 0;
    bool untouched = true, zero = true;
    for (int r = t * tile; r < (t + 1) * tile; ++r)
      for (int j = 0; j < N; ++j) {
        const uint16_t got = out[size_t(r) * N + j];
        untouched &= got == sentinel;
        zero &= (got & 0x7FFF) == 0;
        if (t < used && ex < E) {
          double ref = 0;
          for (int kk = 0; kk < K; ++kk)
            ref += bf16_value(x[size_t(r) * K + kk]) * wt.w[(size_t(ex) * N + j) * K + kk];
          err2 += (bf16_value(got) - ref) * (bf16_value(got) - ref);
          ref2 += ref * ref;
        }
      }
    if (t >= used) {
      ok &= untouched;
      if (!untouched) std::printf("  tile %d (past the used count) was written\n", t);
    } else if (ex >= E) {
      ok &= zero;
      if (!zero) std::printf("  tile %d (expert %d out of range) is not zeros\n", t, ex);
    } else {
      const double rel = std::sqrt(err2 / (ref2 + 1e-30));
      worst = rel > worst ? rel : worst;
      if (rel > 1e-2) {
        ok = false;
        std::printf("  tile %d (expert %d): relative error %.3g\n", t, ex, rel);
      }
    }
  }
  std::printf("check: %d-bit codes, token tile %d: %s (worst tile's relative error %.2e)\n", bits,
              tile, ok ? "ok" : "FAILED", worst);
  standalone::free_all({d_codes, d_s, d_z, d_x, d_d, d_te, d_used});
  return ok;
}

// The gate/up GEMM of E=128 H=2048 I=768 (N = 1536, K = 2048) with `rows` rows in every expert:
// median of 20 launches (us). The operands' values do not matter to the time: constant codes,
// scales and activations.
void time_gate_up(int bits, int tile, int rows) {
  const int E = 128, N = 1536, K = 2048;
  const int per = (rows + tile - 1) / tile, tiles = E * per;
  std::vector<int32_t> tile_expert(tiles);
  for (int t = 0; t < tiles; ++t) tile_expert[t] = t / per;
  const size_t code_bytes = size_t(E) * (K / 16) * (N / 16) * 32 * bits;
  const size_t pairs = size_t(E) * (K / 64) * N;
  uint8_t* d_codes = nullptr;
  uint16_t *d_x = nullptr, *d_d = nullptr;
  CHECK_CUDA(cudaMalloc(&d_codes, code_bytes));
  CHECK_CUDA(cudaMemset(d_codes, 0x5A, code_bytes));
  uint32_t* d_s = to_device(std::vector<uint32_t>(pairs, 0x3C233C23u));  // bf16 0.00996 twice
  uint32_t* d_z = to_device(std::vector<uint32_t>(pairs, 0u));
  CHECK_CUDA(cudaMalloc(&d_x, size_t(tiles) * tile * K * 2));
  CHECK_CUDA(cudaMemset(d_x, 0x3C, size_t(tiles) * tile * K * 2));  // bf16 0.0115
  CHECK_CUDA(cudaMalloc(&d_d, size_t(tiles) * tile * N * 2));
  int32_t* d_te = to_device(tile_expert);
  int32_t* d_used = to_device(std::vector<int32_t>{tiles});
  Shape shape{E, N, K, bits};
  const double us = median_us(
      [&] { return launch(shape, d_codes, d_s, d_z, d_x, d_d, d_te, d_used, tiles, tile); });
  if (us < 0) return;
  const double bytes = double(code_bytes) + 8.0 * pairs;
  std::printf("time: gate/up E=%d N=%d K=%d, %d-bit codes, %d rows per expert, token tile %d: "
              "%.1f us (%.2f TB/s of codes, scales and zeros)\n",
              E, N, K, bits, rows, tile, us, bytes / us * 1e-6);
  standalone::free_all({d_codes, d_s, d_z, d_x, d_d, d_te, d_used});
}

}  // namespace

int main() {
  standalone::print_device();
  std::mt19937 rng(1);
  bool ok = true;
  for (int bits : {4, 8})
    for (int tile : {128, 64}) ok &= check(bits, tile, rng);
  for (int bits : {4, 8})
    for (int rows : {8, 32, 64, 128})
      for (int tile : {128, 64}) time_gate_up(bits, tile, rows);
  std::printf(ok ? "all checks ok\n" : "CHECKS FAILED\n");
  return ok ? 0 : 1;
}
