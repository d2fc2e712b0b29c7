"""dequantize on CUDA in Triton: uint8 blocks [..., N, row_bytes] -> float32 [..., N, n_in],
bit-exact with torch_argon.quant.dequantize_reference (NaNs excepted: a GPU returns its own
canonical NaN from arithmetic; see docs/quantized-formats.md).

out may also be fp16 / bf16 (each value rounded once; the benchmark's dequantize-then-bf16
baseline), not bit-exact then by definition.

Algorithm: the rows are flattened to [rows, row_bytes]. A program dequantizes BLOCK_R rows by
STEP_BLOCKS blocks (32 values at a time, quant_blocks.dequant_chunk) and stores each [32,
BLOCK_R] tile into out [rows, n_in] (the 32 values of a row are consecutive, so the store is
contiguous along the tile's first axis). Compiled with fp fusion off: a multiply followed by a
subtract must round twice, as the reference does.

Launch shape: (cdiv(rows, BLOCK_R), n_blocks / STEP_BLOCKS) programs. Rows past the last are
clamped for the loads and masked for the stores. Limits: the bytes of a row contiguous (the
launcher copies otherwise), out contiguous along n_in.
"""
import triton
import triton.language as tl

from .quant_blocks import dequant_chunk


@triton.jit
def dequantize_kernel(w_ptr, stride_wr, out_ptr, stride_or, n_rows, n_in, tab_ptr,
                      QTYPE: tl.constexpr, BLOCK_BYTES: tl.constexpr, SUBS: tl.constexpr,
                      STEP_BLOCKS: tl.constexpr, MASK_K: tl.constexpr, WORDS: tl.constexpr,
                      BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    row_off = (tl.where(row_ok, rows, 0).to(tl.int64) * stride_wr)[:, None]
    out_rows = out_ptr + rows.to(tl.int64)[:, None] * stride_or
    j = tl.arange(0, 32)[None, :]
    for b in tl.static_range(STEP_BLOCKS):
        blk = tl.program_id(1) * STEP_BLOCKS + b
        for s in tl.static_range(SUBS):
            v = dequant_chunk(w_ptr, row_off, blk, s, n_in, tab_ptr, QTYPE, BLOCK_BYTES, MASK_K,
                              WORDS)
            k = (blk * SUBS + s) * 32 + j
            v = v.to(out_ptr.dtype.element_ty)
            if MASK_K:
                tl.store(out_rows + k, v, mask=row_ok[:, None] & (k < n_in))
            else:
                tl.store(out_rows + k, v, mask=row_ok[:, None])
