// dequantize: the float32 values of GGUF blocks, bit for bit as the reference
// (torch_argon/quant/reference.py) wherever the device keeps NaN payloads and subnormals (the
// host runner does; a GPU returns its canonical NaN from arithmetic, and may flush MXFP4's
// subnormal scales).
//
// One template, instantiated per format with its chunk dequant (quant_blocks.h) as a template
// parameter: "dequantize_<format>" for every row of quant_params.h's ARGON_QUANT_FORMATS.
// Launch: ceil(rows * n_in / 32 / 256) threadgroups of 256 threads; thread t of the grid turns
//   chunk t (row t / chunks_per_row, values 32 (t % chunks_per_row) .. +31) into 32 floats. No
//   threadgroup memory, no barriers.
// Limits: w is contiguous rows of row_bytes bytes; out is contiguous [rows, n_in] float32; the
//   chunk count fits 64 bits and its threadgroups 32.
#include "argon_common.h"
#include "shared/quant_blocks.h"

template <typename Block, uint ELEMS, void (*DQ)(device const Block*, uint, thread float*)>
kernel void dequantize_blocks(device const uchar* w [[buffer(0)]],
                              device float* out [[buffer(1)]],
                              constant ArgonDequantParams& p [[buffer(2)]],
                              uint tg [[threadgroup_position_in_grid]],
                              uint tid [[thread_position_in_threadgroup]]) {
  const ulong chunk = ulong(tg) * ARGON_DQ_THREADS + tid;
  if (chunk >= ulong(p.rows) * p.chunks_per_row) return;
  const ulong row = chunk / p.chunks_per_row;
  const uint c = uint(chunk % p.chunks_per_row);  // chunk within the row
  const uint per_block = ELEMS / ARGON_QUANT_CHUNK;
  device const Block* block =
      (device const Block*)(w + row * p.row_bytes) + c / per_block;
  float v[ARGON_QUANT_CHUNK];
  DQ(block, c % per_block, v);
  device float* dst = out + row * p.n_in + ulong(c) * ARGON_QUANT_CHUNK;
  for (uint j = 0; j < ARGON_QUANT_CHUNK; ++j) dst[j] = v[j];
}

typedef decltype(dequantize_blocks<argon_quant::block_q8_0, 32, argon_quant::dequant_q8_0>)
    dequantize_blocks_t;

#define ARGON_DEQUANTIZE_KERNEL(lower, UPPER, id, elems, bytes)                        \
  template [[host_name("dequantize_" #lower)]] kernel dequantize_blocks_t              \
  dequantize_blocks<argon_quant::block_##lower, elems, argon_quant::dequant_##lower>;
ARGON_QUANT_FORMATS(ARGON_DEQUANTIZE_KERNEL)
#undef ARGON_DEQUANTIZE_KERNEL
