"""The grouped GEMM over a plan's tiles for Hopper (sm_90) and newer: weight tiles through tensor
descriptors (TMA), optionally a persistent grid and half-height blocks over padding rows.
Same contract as moe_mm_kernel.py (the portable kernel, kept for older GPUs); ops.py picks one
per call from the config table (configs.py).

Algorithm. The plan sorts the (token, slot) entries by expert into a padded row space; every
`tile_m` rows belong to one expert (`tile_expert[j]`, -1 = unused). A block is BLOCK_M rows x
BLOCK_N output columns (BLOCK_M divides tile_m, so a block never straddles two experts);
C[rows, cols] = A[rows] @ W[e, cols, :]^T, accumulated in fp32 over the reduction dimension
Kd in BLOCK_K steps (tl.dot: wgmma on sm_90), the loop software-pipelined num_stages deep.
- W is read through a tensor descriptor over the stack viewed 2-D, [E * N_W, Kd] (N_W = 2N
  with SWIGLU, else N; the launcher checks that the expert slabs are contiguous rows and the
  strides 16-byte aligned): the copy engine brings each [BLOCK_N, BLOCK_K] tile to shared
  memory, no thread computes a weight address. Rows past an expert's N_W read the next
  expert's rows, past the stack zeros: either way they feed only columns >= N, which the store
  masks. Kd tails read zeros.
- GATHER: A's rows are x's rows through the plan's row -> token index (`row_token`,
  sorted_token; -1 and tokens outside [0, T) read as zeros), by pointer loads (the rows are
  scattered, so a tile descriptor cannot fetch them). Otherwise A is row-ordered [R, Kd]:
  A_TMA reads it through a descriptor too, else by pointer loads.
- SWIGLU: W is a gate_up stack [E, 2N, Kd] (gate rows, then up rows). Each K step loads the
  gate tile (rows e*2N + n0...) and the up tile (rows e*2N + N + n0...) and runs two dots
  into two accumulators of the same layout, so the epilogue act(gate) * up (fp32, rounded
  once) needs no shuffle. ACTIVATION: 0 silu, 1 gelu (erf), 2 gelu (tanh form).
- SKIP_PADDING (needs row_token and BLOCK_M >= 32): an expert's rows come first in its range
  and padding (-1) after, so two token reads tell a block's live height: row0 padding -> the
  whole block is padding (skipped like an unused tile); row0 + BLOCK_M/2 padding -> the second
  half is, and the block runs a BLOCK_M/2-row MMA. With tile_m = 128 an expert's last tile
  then costs a 64-row MMA when it holds <= 64 rows: the compute of tile_m = 64 padding at
  128-row MMA efficiency everywhere else.
- C_TMA: the result leaves through a descriptor too (the copy engine's bulk store, which clips
  columns >= N), else by masked pointer stores.
- ZERO_UNUSED: rows of unused tiles, and skipped padding rows, are written with zeros (the
  moe_mm contract: padding rows of xs are zeros, so their outputs are); off, nothing writes
  them (the layer never reads them).
- PERSISTENT: NUM_PROGRAMS programs loop over the blocks (block = program id + i *
  NUM_PROGRAMS) up to the used tiles' blocks, read from meta's n_tiles on the device (no host
  sync; all blocks with ZERO_UNUSED, which must write the unused ones); otherwise one program
  per block of the shape-sized grid, and a program whose block is unused exits after two
  scalar loads. (Triton 3.6's warp specialization of that loop, tl.range(warp_specialize=True),
  compiles for sm_90 to the very same SASS as without it: not offered; bench/triton_gemm_notes.md.)

Block order: block ids run over the column blocks fastest, so programs in flight at one time
share their A rows and, where an expert owns several consecutive tiles, its weight tiles
(read once from memory, then from L2).

Masking invariants: nothing is read outside x, W or A (descriptor bounds; gathered tokens
clamped to row 0 and masked); every store is masked to columns < N, and rows of a block are
all inside C (R is a multiple of tile_m); a used tile's live rows are always written.
Limits: tile_m >= 16, BLOCK_M <= tile_m, BLOCK_M / 2 >= 16 with SKIP_PADDING; W and a
row-ordered A with unit last stride (the launcher falls back to the portable kernel else);
fp16 / bf16 operands, fp32 accumulation; descriptor coordinates are int32 (E * N_W < 2^31).
The descriptors are built on the device (tl.make_tensor_descriptor), so the kernel takes plain
pointers (CUDA graphs, torch.compile); they need Triton's global scratch allocator (ops.py).
"""
import triton
import triton.language as tl

from .moe_mm_kernel import gated_activation


@triton.jit
def _block_product(a_ptr, stride_am, stride_ak, a_desc, row_token_ptr, w_desc, w_row, row0,
                   N, Kd, n_a_rows,
                   ROWS: tl.constexpr, GATHER: tl.constexpr, A_TMA: tl.constexpr,
                   SWIGLU: tl.constexpr, ACTIVATION: tl.constexpr, EVEN_K: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The [ROWS, BLOCK_N] fp32 result of rows row0.. against weight rows w_row.. (and the up
    rows w_row + N.. with SWIGLU, then act(gate) * up)."""
    rows = row0 + tl.arange(0, ROWS)
    offs_k = tl.arange(0, BLOCK_K)
    if GATHER:
        token = tl.load(row_token_ptr + rows)
        row_ok = (token >= 0) & (token < n_a_rows)  # a corrupt plan never reads outside x
        a_rows = tl.where(row_ok, token, 0).to(tl.int64) * stride_am
    else:
        row_ok = rows >= 0
        a_rows = rows.to(tl.int64) * stride_am
    a_ptrs = a_ptr + a_rows[:, None] + offs_k[None, :] * stride_ak
    acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, Kd, BLOCK_K):
        if A_TMA:
            a = a_desc.load([row0, k0])
        elif EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
        else:
            a = tl.load(a_ptrs, mask=row_ok[:, None] & ((k0 + offs_k) < Kd)[None, :], other=0.0)
        acc = tl.dot(a, w_desc.load([w_row, k0]).T, acc)
        if SWIGLU:
            acc_up = tl.dot(a, w_desc.load([w_row + N, k0]).T, acc_up)
        a_ptrs += BLOCK_K * stride_ak
    if SWIGLU:
        acc = gated_activation(acc, ACTIVATION) * acc_up  # in fp32
    return acc


@triton.jit
def _store_rows(c_ptr, stride_cm, stride_cn, c_desc, row0, n0, N, value,
                ROWS: tl.constexpr, BLOCK_N: tl.constexpr, C_TMA: tl.constexpr):
    """C[row0:row0+ROWS, n0:n0+BLOCK_N] = value (rounded to C's dtype), columns < N: through
    the descriptor (C_TMA: the copy engine clips the columns), else masked pointer stores."""
    if C_TMA:
        c_desc.store([row0, n0], value.to(c_ptr.dtype.element_ty))
    else:
        rows = row0 + tl.arange(0, ROWS)
        cols = n0 + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, value.to(c_ptr.dtype.element_ty), mask=cols[None, :] < N)


@triton.jit
def _one_block(blk, a_ptr, stride_am, stride_ak, a_desc, a_half_desc, row_token_ptr, w_desc,
               c_ptr, stride_cm, stride_cn, c_desc, c_half_desc, tile_expert_ptr, n_tiles,
               N, Kd, tile_m, n_expert, n_a_rows, N_W,
               GATHER: tl.constexpr, A_TMA: tl.constexpr, C_TMA: tl.constexpr,
               SWIGLU: tl.constexpr, ZERO_UNUSED: tl.constexpr, ACTIVATION: tl.constexpr,
               SKIP_PADDING: tl.constexpr, EVEN_K: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Block blk (column blocks fastest): its product, its half-height product, or zeros."""
    n_col_blocks = tl.cdiv(N, BLOCK_N)
    row0 = (blk // n_col_blocks) * BLOCK_M
    n0 = (blk % n_col_blocks) * BLOCK_N
    tile = row0 // tile_m
    expert = tl.load(tile_expert_ptr + tile)
    used = (tile < n_tiles) & (expert >= 0) & (expert < n_expert)
    w_row = expert * N_W + n0
    HALF: tl.constexpr = BLOCK_M // 2
    if SKIP_PADDING:
        live = used & (tl.load(row_token_ptr + row0) != -1)
        full = live & (tl.load(row_token_ptr + row0 + HALF) != -1)
    else:
        live = used
        full = used
    if full:
        acc = _block_product(a_ptr, stride_am, stride_ak, a_desc, row_token_ptr, w_desc,
                             w_row, row0, N, Kd, n_a_rows, BLOCK_M, GATHER, A_TMA, SWIGLU,
                             ACTIVATION, EVEN_K, BLOCK_N, BLOCK_K)
        _store_rows(c_ptr, stride_cm, stride_cn, c_desc, row0, n0, N, acc, BLOCK_M, BLOCK_N,
                    C_TMA)
    elif live:
        if SKIP_PADDING:  # the second half is padding
            acc = _block_product(a_ptr, stride_am, stride_ak, a_half_desc, row_token_ptr,
                                 w_desc, w_row, row0, N, Kd, n_a_rows, HALF, GATHER, A_TMA,
                                 SWIGLU, ACTIVATION, EVEN_K, BLOCK_N, BLOCK_K)
            _store_rows(c_ptr, stride_cm, stride_cn, c_half_desc, row0, n0, N, acc, HALF,
                        BLOCK_N, C_TMA)
            if ZERO_UNUSED:
                _store_rows(c_ptr, stride_cm, stride_cn, c_half_desc, row0 + HALF, n0, N,
                            tl.zeros((HALF, BLOCK_N), dtype=tl.float32), HALF, BLOCK_N, C_TMA)
    elif ZERO_UNUSED:
        _store_rows(c_ptr, stride_cm, stride_cn, c_desc, row0, n0, N,
                    tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), BLOCK_M, BLOCK_N, C_TMA)


@triton.jit
def _rows_descriptors(ptr, n_rows, n_cols, stride, BLOCK_M: tl.constexpr,
                      BLOCK_COLS: tl.constexpr, HALF_TOO: tl.constexpr):
    """Descriptors over a row-major [n_rows, n_cols] matrix: blocks of BLOCK_M rows, and of
    BLOCK_M / 2 rows (HALF_TOO; else the same descriptor twice)."""
    full = tl.make_tensor_descriptor(ptr, shape=[n_rows, n_cols], strides=[stride, 1],
                                     block_shape=[BLOCK_M, BLOCK_COLS])
    if HALF_TOO:
        half = tl.make_tensor_descriptor(ptr, shape=[n_rows, n_cols], strides=[stride, 1],
                                         block_shape=[BLOCK_M // 2, BLOCK_COLS])
    else:
        half = full
    return full, half


@triton.jit
def moe_mm_tma_kernel(
    a_ptr, stride_am, stride_ak,  # A: x [T, Kd] (GATHER) or row-ordered [R, Kd]
    row_token_ptr,  # sorted_token [R], int32: read with GATHER or SKIP_PADDING
    w_ptr, stride_we, stride_wn,  # W [E, N_W, Kd], unit last stride, stride_we = N_W*stride_wn
    c_ptr, stride_cm, stride_cn,  # C [R, N]
    tile_expert_ptr, meta_ptr,
    N, Kd, tile_m, n_expert, n_a_rows, n_rows,
    META_N_TILES: tl.constexpr,
    GATHER: tl.constexpr, A_TMA: tl.constexpr, C_TMA: tl.constexpr, SWIGLU: tl.constexpr,
    ZERO_UNUSED: tl.constexpr, ACTIVATION: tl.constexpr, SKIP_PADDING: tl.constexpr,
    PERSISTENT: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    tl.static_assert((not SKIP_PADDING) or BLOCK_M >= 32)
    if SWIGLU:
        N_W = 2 * N
    else:
        N_W = N
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[n_expert * N_W, Kd], strides=[stride_wn, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    if A_TMA:
        a_desc, a_half_desc = _rows_descriptors(a_ptr, n_rows, Kd, stride_am, BLOCK_M, BLOCK_K,
                                                SKIP_PADDING)
    else:
        a_desc, a_half_desc = w_desc, w_desc  # unused placeholders
    if C_TMA:
        c_desc, c_half_desc = _rows_descriptors(c_ptr, n_rows, N, stride_cm, BLOCK_M, BLOCK_N,
                                                SKIP_PADDING)
    else:
        c_desc, c_half_desc = w_desc, w_desc
    n_tiles = tl.load(meta_ptr + META_N_TILES)
    if PERSISTENT:
        n_row_blocks = n_rows // BLOCK_M
        if not ZERO_UNUSED:  # stop after the used tiles (n_tiles from the device)
            n_row_blocks = tl.minimum(n_tiles * (tile_m // BLOCK_M), n_row_blocks)
        for blk in range(tl.program_id(0), n_row_blocks * tl.cdiv(N, BLOCK_N), NUM_PROGRAMS):
            _one_block(blk, a_ptr, stride_am, stride_ak, a_desc, a_half_desc, row_token_ptr,
                       w_desc, c_ptr, stride_cm, stride_cn, c_desc, c_half_desc,
                       tile_expert_ptr, n_tiles, N, Kd, tile_m, n_expert, n_a_rows, N_W,
                       GATHER, A_TMA, C_TMA, SWIGLU, ZERO_UNUSED, ACTIVATION, SKIP_PADDING,
                       EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        _one_block(tl.program_id(0), a_ptr, stride_am, stride_ak, a_desc, a_half_desc,
                   row_token_ptr, w_desc, c_ptr, stride_cm, stride_cn, c_desc, c_half_desc,
                   tile_expert_ptr, n_tiles, N, Kd, tile_m, n_expert, n_a_rows, N_W,
                   GATHER, A_TMA, C_TMA, SWIGLU, ZERO_UNUSED, ACTIVATION, SKIP_PADDING,
                   EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K)
