"""Row-wise top-k of router scores, in Triton: the same experts, in the same order, as
torch.topk(scores, k, dim=-1) (largest first; among equal scores the lowest index first).

Algorithm: a program holds BLOCK_T rows of the [T, E] scores in registers (E padded to the next
power of two) and repeats k times: row maximum, the lowest column holding it, store both,
retire that column. k small reductions over registers instead of torch.topk's
radix-select-and-sort kernels (which cost 74 us at T=2048, E=512 on the H200).

LET_NEXT_START (sm_90+ only): each program first lets the next kernel of the stream start, if
that kernel was launched with programmatic dependent launch (the CUDA plan is): it may then set
up while this one runs, and it waits for this kernel's outputs before reading them (PTX
griddepcontrol). The router's top-k is what comes before the plan in a layer.

Launch shape: cdiv(T, BLOCK_T) programs. Limits: E <= 8192 (one row block in registers);
float scores; rows holding NaN are not ordered as torch.topk orders them (torch puts NaN above
every number): router scores from softmax or sigmoid of finite logits hold none.
"""
import triton
import triton.language as tl


@triton.jit
def topk_rows_kernel(s_ptr, stride_st, stride_se, val_ptr, idx_ptr, T, E,
                     K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                     LET_NEXT_START: tl.constexpr = False):
    if LET_NEXT_START:
        tl.extra.cuda.gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < T
    alive = row_ok[:, None] & (cols[None, :] < E)
    v = tl.load(s_ptr + rows.to(tl.int64)[:, None] * stride_st + cols[None, :] * stride_se,
                mask=alive, other=float("-inf")).to(tl.float32)
    out = rows.to(tl.int64) * K
    for k in tl.static_range(K):
        best = tl.max(tl.where(alive, v, float("-inf")), axis=1)
        hit = alive & (v == best[:, None])
        pick = tl.min(tl.where(hit, cols[None, :], BLOCK_E), axis=1)
        tl.store(val_ptr + out + k, best, mask=row_ok)
        tl.store(idx_ptr + out + k, pick.to(tl.int64), mask=row_ok)
        alive = alive & (cols[None, :] != pick[:, None])
