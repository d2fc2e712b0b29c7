"""The grouped GEMM over a plan's tiles, in Triton (one kernel; the options are compile-time).

Algorithm. The plan sorts the (token, slot) entries by expert into a padded row space; every
`tile_m` rows belong to one expert (`tile_expert[j]`, -1 = unused). One program computes one
BLOCK_M x BLOCK_N block of the output, C[rows, cols] = A[rows] @ W[e, cols, :]^T, accumulating
in fp32 over the reduction dimension in BLOCK_K steps (tl.dot: wgmma/mma on the tensor cores).
- GATHER: A's rows are read straight from x through the plan's row -> token index
  (`sorted_token`, -1 = padding row: read as zeros), so the gathered copy of x is never written.
  Tokens outside [0, T) (a corrupt plan) read as zeros too: nothing outside x is read.
- SWIGLU: W is a gate_up stack [E, 2N, Kd] (gate rows, then up rows). The program's weight
  tile interleaves the matching gate and up rows (column 2j: gate row n0+j, 2j+1: up row
  N+n0+j), so one tl.dot of width 2*BLOCK_N computes both (a wide wgmma, not two narrow ones);
  the accumulator is split into gate and up in registers and the program stores
  act(gate) * up, computed in fp32 and rounded once: the [R, 2N] gate/up intermediate is never
  written. ACTIVATION picks act: 0 silu, 1 gelu (erf), 2 gelu (tanh form), the codes of
  torch_argon/metal/argon_params.h.
- ZERO_UNUSED: rows of unused tiles are written with zeros (the moe_mm contract); the layer
  turns it off, because nothing reads those rows.

Launch shape: a 1-D grid of (R / BLOCK_M) * cdiv(N, BLOCK_N) programs, sized from shapes only
(no host sync). Program ids run over the column blocks fastest, so the programs in flight at
one time share their A rows (read once from memory, then from L2) and, where an expert owns
several consecutive tiles, its weight blocks too: each weight byte crosses HBM about once.
A program whose tile is unused (expert -1 or out of range, or tile >= meta's n_tiles) exits
after its first loads.

Limits: BLOCK_M divides tile_m (a row block never straddles two experts); tile_m >= 16
(tl.dot's smallest M). Any strides for A, W and C (read through them, no copies); 64-bit
offsets for W and gathered rows. fp16 / bf16 operands, fp32 accumulation.
"""
import triton
import triton.language as tl


@triton.jit
def moe_mm_kernel(
    a_ptr, stride_am, stride_ak,  # A: x [T, Kd] (GATHER) or row-ordered xs [R, Kd]
    row_token_ptr,  # sorted_token [R], int32; read only when GATHER
    w_ptr, stride_we, stride_wn, stride_wk,  # W [E, N or 2N, Kd]
    c_ptr, stride_cm, stride_cn,  # C [R, N]
    tile_expert_ptr, meta_ptr,
    N, Kd, tile_m, n_expert, n_a_rows,
    META_N_TILES: tl.constexpr,
    GATHER: tl.constexpr, SWIGLU: tl.constexpr, ZERO_UNUSED: tl.constexpr,
    ACTIVATION: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(N, BLOCK_N)
    pid_m = pid // n_blocks
    pid_n = pid % n_blocks
    row0 = pid_m * BLOCK_M
    tile = row0 // tile_m

    rows = row0 + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    c_mask = cols[None, :] < N

    expert = tl.load(tile_expert_ptr + tile)
    n_tiles = tl.load(meta_ptr + META_N_TILES)
    if (tile >= n_tiles) | (expert < 0) | (expert >= n_expert):
        if ZERO_UNUSED:
            tl.store(c_ptrs, tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty),
                     mask=c_mask)
        return

    offs_k = tl.arange(0, BLOCK_K)
    if GATHER:
        token = tl.load(row_token_ptr + rows)
        row_ok = (token >= 0) & (token < n_a_rows)  # a corrupt plan never reads outside x
        a_rows = tl.where(row_ok, token, 0).to(tl.int64) * stride_am
    else:
        row_ok = rows >= 0  # every row of a used tile is read (padding rows hold zeros)
        a_rows = rows.to(tl.int64) * stride_am
    a_ptrs = a_ptr + a_rows[:, None] + offs_k[None, :] * stride_ak

    # Weight rows: column indices wrap instead of being masked (the store is masked), so the
    # weight loads stay unmasked along N.
    if SWIGLU:
        j = tl.arange(0, 2 * BLOCK_N)
        w_rows = (j % 2) * N + (pid_n * BLOCK_N + j // 2) % N  # gate, up, gate, up, ...
    else:
        w_rows = cols % N
    w_base = w_ptr + expert.to(tl.int64) * stride_we
    w_ptrs = w_base + w_rows[None, :] * stride_wn + offs_k[:, None] * stride_wk  # [BK, BN(*2)]

    acc = tl.zeros((BLOCK_M, 2 * BLOCK_N if SWIGLU else BLOCK_N), dtype=tl.float32)
    for k0 in range(0, Kd, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            w = tl.load(w_ptrs)
        else:
            k_ok = (k0 + offs_k) < Kd
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[:, None], other=0.0)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    if SWIGLU:
        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N, 2)))
        acc = gated_activation(gate, ACTIVATION) * up  # in fp32
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def gated_activation(g, ACTIVATION: tl.constexpr):
    """act(g) in fp32 for the gated epilogue: silu, gelu (erf) or gelu (tanh form), as torch
    writes them; tanh as 1 - 2 / (1 + exp(2z)), which Triton's interpreter also runs."""
    if ACTIVATION == 1:
        return g * (0.5 * (1.0 + tl.math.erf(g * 0.7071067811865476)))
    elif ACTIVATION == 2:
        z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        return g * (0.5 * (2.0 - 2.0 / (1.0 + tl.exp(2.0 * z))))
    else:
        return g / (1.0 + tl.exp(-g))
