// The quantized op family's shared definitions: the GGUF block formats the kernels read (one
// X-macro row each, expanded by the Metal kernels' instantiations, the host adapters, the launch
// recipe and the C++ format table), the params structs of dequantize and moe_qmm, and their
// launch geometry. Plain old data, included by the host code and the shaders alike.
// Layouts and formulas: docs/quantized-formats.md.
#pragma once

#include "shared/argon_params.h"

// X(lower, UPPER, ggml type id, values per block, bytes per block). `lower` names the block
// struct (block_<lower>) and the chunk dequant (dequant_<lower>) of quant_blocks.h and the
// kernels ("dequantize_<lower>", "moe_qmm_<lower>"); `UPPER` is the GGUF type name.
// The plain float types (F32 0, F16 1, BF16 30) are not here: they are no blocks to dequantize.
// The rows are written from the format records (torch_argon/quant/formats.py) by
// tools/gen_quant_tables.py; tests/test_format_records.py fails when they disagree.
#define ARGON_QUANT_FORMATS(X)    \
  X(q8_0, Q8_0, 8, 32, 34)        \
  X(q4_0, Q4_0, 2, 32, 18)        \
  X(q5_0, Q5_0, 6, 32, 22)        \
  X(iq4_nl, IQ4_NL, 20, 32, 18)   \
  X(mxfp4, MXFP4, 39, 32, 17)     \
  X(iq4_xs, IQ4_XS, 23, 256, 136) \
  X(q4_k, Q4_K, 12, 256, 144)     \
  X(q5_k, Q5_K, 13, 256, 176)     \
  X(q6_k, Q6_K, 14, 256, 210)     \
  X(iq2_xs, IQ2_XS, 17, 256, 74)  \
  X(q3_k, Q3_K, 11, 256, 110)     \
  X(iq3_s, IQ3_S, 21, 256, 110)   \
  X(q2_k, Q2_K, 10, 256, 84)

// Every dequant function produces one chunk of this many consecutive values of a row.
#define ARGON_QUANT_CHUNK 32

// dequantize: out[r, 32c .. 32c+31] = chunk c of row r of w (rows back to back, row_bytes each).
struct ArgonDequantParams {
  argon_u32 rows;            // rows of w (all leading dims flattened)
  argon_u32 n_in;            // values per row (a multiple of the block)
  argon_u32 row_bytes;       // bytes per row: n_in / block elems * block bytes
  argon_u32 chunks_per_row;  // n_in / 32
};
static_assert(sizeof(ArgonDequantParams) == 16, "ArgonDequantParams: 4 x u32");

// moe_qmm: out[r] = xs[r] @ dequant(w[e])^T for rows of tiles owned by expert e, zero where e
// is -1 (or outside [0, E)).
struct ArgonMoeQmmParams {
  argon_u64 xs_row_stride, xs_col_stride;  // in elements (xs may be a view)
  argon_u64 w_expert_stride, w_row_stride;  // in bytes
  argon_u32 rows;      // R_max (rows of xs and out)
  argon_u32 n;         // N (output columns: weight rows per expert)
  argon_u32 n_in;      // the reduction dim (values per weight row, a multiple of the block)
  argon_u32 tile_m;    // the plan's rows per tile
  argon_u32 n_expert;  // E
  argon_u32 dtype;     // ArgonDtype of xs and out
};
static_assert(sizeof(ArgonMoeQmmParams) == 56, "ArgonMoeQmmParams: 4 x u64 + 6 x u32");

#define ARGON_DQ_THREADS 256  // dequantize: threads per threadgroup, one 32-value chunk each
#define ARGON_QMM_BM 32       // moe_qmm: rows of xs per threadgroup
#define ARGON_QMM_BN 64       // moe_qmm: weight rows (output columns) per threadgroup
#define ARGON_QMM_BK 64       // moe_qmm: reduction step (2 chunks of each weight row)
#define ARGON_QMM_THREADS 128  // moe_qmm: 4 simdgroups; one chunk dequant per thread per step
