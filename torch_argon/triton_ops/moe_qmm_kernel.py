"""The grouped GEMM over a plan's tiles with GGUF-quantized weights, in Triton: the dense
kernel's algorithm (moe_mm_kernel.py: tiles, GATHER, SWIGLU, ZERO_UNUSED, launch order) with
the weight tile dequantized in registers inside the K loop. The dequantized weights never exist
in memory.

Algorithm. One program computes a BLOCK_M x BLOCK_N block of C[rows, cols] =
A[rows] @ dequant(W[e])[cols, :]^T. Its K loop walks the weight rows' blocks (STEP_BLOCKS
blocks per iteration); each 32-value chunk of a block is dequantized into a float32 [32, BN]
tile (quant_blocks.dequant_chunk: the chunk's quant bytes, 16-32 consecutive bytes of each row,
read once; its scales once per row), rounded to A's dtype, and multiplied with the matching
[BLOCK_M, 32] slice of A by tl.dot (fp32 accumulation). So each weight byte is read once per
program, and a program's weight tile is BN rows of 32 values at a time: what the tensor cores
need next, and nothing more in registers.
- GATHER: A's rows are x's rows through sorted_token (-1 or out of [0, T): zeros), as the dense
  kernel.
- SWIGLU: W is a byte-concatenated gate_up tensor [E, 2N, row_bytes] (gate rows, then up rows,
  one format); the program's weight tile interleaves gate row n0+j and up row N+n0+j, one
  tl.dot of width 2*BLOCK_N computes both, the epilogue stores silu(gate) * up (fp32, rounded
  once).
- ZERO_UNUSED: rows of unused tiles are written with zeros (the moe_qmm contract).
- HAS_META: tiles at or past the plan's n_tiles (meta) are unused, as in the dense kernel;
  without meta (the moe_qmm op, whose schema has none) every tile with an expert in [0, E) runs.
- ROWS < BLOCK_M: a tile_m below tl.dot's 16 rows (the moe_qmm contract allows tile_m >= 1):
  a program takes the ROWS rows of one tile and masks the rest.

Launch shape: a 1-D grid of (R / ROWS) * cdiv(N, BLOCK_N) programs, column blocks fastest (the
programs in flight share their A rows, and an expert's consecutive tiles its weight blocks, in
L2). An unused tile's program exits after its first loads.

Limits: the bytes of a weight row contiguous (any strides for E and N); n_in a multiple of the
format's block (the float types: any n_in, masked); BLOCK_M >= 16; A fp16 / bf16 (tensor cores)
or fp32 (DOT_PRECISION "ieee": exact products, FMA units; the moe_qmm op only). 64-bit offsets
for W and gathered rows.
"""
import triton
import triton.language as tl

from .quant_blocks import dequant_chunk


@triton.jit
def moe_qmm_kernel(
    a_ptr, stride_am, stride_ak,  # A: x [T, n_in] (GATHER) or row-ordered xs [R, n_in]
    row_token_ptr,  # sorted_token [R], int32; read only when GATHER
    w_ptr, stride_we, stride_wn,  # W: uint8 [E, N or 2N, row_bytes]
    tab_ptr,  # the lookup tables (quant_blocks.device_tables)
    c_ptr, stride_cm, stride_cn,  # C [R, N]
    tile_expert_ptr, meta_ptr,
    N, n_in, n_blocks, tile_m, n_expert, n_a_rows, n_tiles_all,
    META_N_TILES: tl.constexpr, HAS_META: tl.constexpr,
    GATHER: tl.constexpr, SWIGLU: tl.constexpr, ZERO_UNUSED: tl.constexpr,
    QTYPE: tl.constexpr, BLOCK_BYTES: tl.constexpr, SUBS: tl.constexpr,
    STEP_BLOCKS: tl.constexpr, MASK_K: tl.constexpr, WORDS: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SWAP_AB: tl.constexpr,
):
    pid = tl.program_id(0)
    n_col_blocks = tl.cdiv(N, BLOCK_N)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    row0 = pid_m * ROWS
    tile = row0 // tile_m

    r = tl.arange(0, BLOCK_M)
    row_in = r < ROWS  # all true unless tile_m < BLOCK_M
    rows = row0 + r
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    c_mask = row_in[:, None] & (cols[None, :] < N)

    expert = tl.load(tile_expert_ptr + tile)
    if HAS_META:
        n_tiles = tl.load(meta_ptr + META_N_TILES)
    else:
        n_tiles = n_tiles_all
    if (tile >= n_tiles) | (expert < 0) | (expert >= n_expert):
        if ZERO_UNUSED:
            tl.store(c_ptrs, tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty),
                     mask=c_mask)
        return

    offs_k = tl.arange(0, 32)
    if GATHER:
        token = tl.load(row_token_ptr + rows, mask=row_in, other=-1)
        row_ok = (token >= 0) & (token < n_a_rows)  # a corrupt plan never reads outside x
        a_rows = tl.where(row_ok, token, 0).to(tl.int64) * stride_am
    else:
        row_ok = row_in
        a_rows = tl.where(row_in, rows, 0).to(tl.int64) * stride_am
    a_ptrs = a_ptr + a_rows[:, None] + offs_k[None, :] * stride_ak

    # Weight rows: column indices wrap instead of being masked (the store is masked).
    if SWIGLU:
        jn = tl.arange(0, 2 * BLOCK_N)
        w_rows = (jn % 2) * N + (pid_n * BLOCK_N + jn // 2) % N  # gate, up, gate, up, ...
    else:
        w_rows = cols % N
    w_row_off = (expert.to(tl.int64) * stride_we + w_rows.to(tl.int64) * stride_wn)[:, None]

    W_ROWS: tl.constexpr = 2 * BLOCK_N if SWIGLU else BLOCK_N
    if SWAP_AB:
        acc = tl.zeros((W_ROWS, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, W_ROWS), dtype=tl.float32)
    for step in range(0, n_blocks // STEP_BLOCKS):
        for b in tl.static_range(STEP_BLOCKS):
            blk = step * STEP_BLOCKS + b
            for s in tl.static_range(SUBS):
                w = dequant_chunk(w_ptr, w_row_off, blk, s, n_in, tab_ptr, QTYPE, BLOCK_BYTES,
                                  MASK_K, WORDS)
                k = (blk * SUBS + s) * 32
                if MASK_K:
                    a = tl.load(a_ptrs + k * stride_ak,
                                mask=row_ok[:, None] & ((k + offs_k) < n_in)[None, :], other=0.0)
                else:
                    a = tl.load(a_ptrs + k * stride_ak, mask=row_ok[:, None], other=0.0)
                w = w.to(a_ptr.dtype.element_ty)
                if SWAP_AB:
                    acc = tl.dot(w, tl.trans(a), acc, input_precision=DOT_PRECISION)
                else:
                    acc = tl.dot(a, tl.trans(w), acc, input_precision=DOT_PRECISION)

    if SWAP_AB:
        acc = tl.trans(acc)
    if SWIGLU:
        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N, 2)))
        acc = gate / (1.0 + tl.exp(-gate)) * up  # silu(gate) * up in fp32
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
