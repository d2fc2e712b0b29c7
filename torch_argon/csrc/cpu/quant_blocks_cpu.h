// The per-format chunk dequants of torch_argon/metal/quant_blocks.h for the CPU kernels, so the
// CPU, the Metal kernels and the Metal-on-host runner share one implementation. Include this
// header after every other one (quant_blocks_host.h says why).
#pragma once
#include "cpu_clones.h"
#include "quant_blocks_host.h"

namespace argon {

// dequant(block, c, v): values 32c .. 32c+31 of one block into v[0..31].
template <typename Block>
using ChunkDequant = void (*)(const Block*, uint32_t, float*);

// Calls `f.template operator()<Block, ELEMS, BYTES, DQ>()` for the format with ggml id qtype
// (one of ARGON_QUANT_FORMATS; the checks have refused any other).
template <typename F>
void dispatch_quant_format(int64_t qtype, F&& f) {
  switch (qtype) {
#define ARGON_QUANT_CASE(lower, UPPER, id, elems, bytes)                                  \
  case id:                                                                                \
    static_assert(sizeof(argon_quant::block_##lower) == bytes, #UPPER " block size");    \
    return f.template operator()<argon_quant::block_##lower, elems, bytes,               \
                                 argon_quant::dequant_##lower>();
    ARGON_QUANT_FORMATS(ARGON_QUANT_CASE)
#undef ARGON_QUANT_CASE
    default:
      TORCH_CHECK_VALUE(false, "no CPU kernel for qtype ", qtype);
  }
}

namespace {  // each including file compiles its own copy (and its own AVX2 clone)

// Rows [0, rows) of blocks (row r at w + r * row_stride) into out, n_in values per row.
template <typename Block, int ELEMS, ChunkDequant<Block> DQ>
ARGON_CPU_CLONES void dequantize_rows(const uint8_t* w, int64_t row_stride, int64_t rows,
                                      int64_t n_in, float* out) {
  const int64_t blocks = n_in / ELEMS;
  for (int64_t r = 0; r < rows; ++r) {
    const Block* row = reinterpret_cast<const Block*>(w + r * row_stride);
    float* o = out + r * n_in;
    for (int64_t b = 0; b < blocks; ++b) {
      for (uint32_t c = 0; c < ELEMS / ARGON_QUANT_CHUNK; ++c) {
        DQ(row + b, c, o + b * ELEMS + c * ARGON_QUANT_CHUNK);
      }
    }
  }
}

}  // namespace

}  // namespace argon
