"""Equivalents of the compiled vLLM ops that its Triton fused_moe path calls between its two GEMM
kernels. vLLM's own (`torch.ops._moe_C.moe_align_block_size`, `torch.ops._C.silu_and_mul` /
`gelu_and_mul` / `gelu_tanh_and_mul`, `torch.ops._moe_C.moe_sum`) are built for another torch
and cannot be loaded here; these compute the same outputs in the same buffers, and the
benchmark times them inside vLLM's path (and on their own, so their share can be read off).

- moe_align_block_size: each routed entry's flat index placed in its expert's run of
  sorted_ids, every run padded to a multiple of block_size with the sentinel topk_ids.numel();
  expert_ids[b] = the expert of block b; num_tokens_post_pad = the padded total. Three Triton
  kernels after one memset: count per expert (atomics), one program per expert (its run's start
  from the counts, its blocks' expert ids, its padding), then placement (an atomic cursor per
  expert). The order of entries within an expert's run is arbitrary, as in vLLM's kernel; every
  GEMM row is computed on its own, so the outputs do not depend on it. Ids outside [0, E) are
  skipped, as vLLM's `ignore_invalid_experts=True` does (its caller then reads rows nobody
  wrote: vLLM's path without an expert map takes no -1 ids, and neither does this baseline).
- act_and_mul: out = act(gate) * up over rows [gate | up], the activation computed in fp32 and
  rounded to the dtype before the product, rounded again after it (vLLM's act_and_mul kernel);
  silu, gelu (erf) and gelu_tanh. One Triton kernel.
- moe_sum: out[t] = sum over k of y[t, k]: for top_k of 2 to 4 vLLM's kernel adds in the
  dtype, term by term (done here the same way); otherwise vLLM calls torch.sum over the top-k
  axis, and so does this.
"""
import torch
import triton
import triton.language as tl

ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


@triton.jit
def _count_kernel(ids_ptr, counts_ptr, n, n_expert, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(ids_ptr + offs, mask=offs < n, other=-1).to(tl.int32)
    valid = (offs < n) & (e >= 0) & (e < n_expert)
    tl.atomic_add(counts_ptr + e, 1, mask=valid)


@triton.jit
def _runs_kernel(counts_ptr, starts_ptr, sorted_ids_ptr, expert_ids_ptr, total_ptr, n,
                 n_expert, block_size, E_POW2: tl.constexpr, PAD: tl.constexpr,
                 FILL: tl.constexpr):
    """Program e: the start of expert e's padded run (the padded counts of the experts before
    it), its blocks' expert ids, the sentinel in its padding; program 0 also the total."""
    e = tl.program_id(0)
    offs_e = tl.arange(0, E_POW2)
    counts = tl.load(counts_ptr + offs_e, mask=offs_e < n_expert, other=0)
    padded = (counts + block_size - 1) // block_size * block_size
    start = tl.sum(tl.where(offs_e < e, padded, 0), axis=0)
    mine = tl.sum(tl.where(offs_e == e, padded, 0), axis=0)
    count = tl.sum(tl.where(offs_e == e, counts, 0), axis=0)
    tl.store(starts_ptr + e, start)
    if e == 0:
        tl.store(total_ptr, tl.sum(padded, axis=0))
    first_block = start // block_size
    n_blocks = mine // block_size
    for b in range(0, n_blocks, FILL):
        offs_b = first_block + b + tl.arange(0, FILL)
        tl.store(expert_ids_ptr + offs_b, e + tl.zeros([FILL], tl.int32),
                 mask=offs_b < first_block + n_blocks)
    offs_p = start + count + tl.arange(0, PAD)
    tl.store(sorted_ids_ptr + offs_p, n + tl.zeros([PAD], tl.int32), mask=offs_p < start + mine)


@triton.jit
def _place_kernel(ids_ptr, starts_ptr, cursor_ptr, sorted_ids_ptr, n, n_expert,
                  BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(ids_ptr + offs, mask=offs < n, other=-1).to(tl.int32)
    valid = (offs < n) & (e >= 0) & (e < n_expert)
    rank = tl.atomic_add(cursor_ptr + e, 1, mask=valid)
    start = tl.load(starts_ptr + e, mask=valid, other=0)
    tl.store(sorted_ids_ptr + start + rank, offs.to(tl.int32), mask=valid)


def moe_align_block_size(topk_ids, num_experts, block_size, sorted_ids, expert_ids,
                         num_tokens_post_pad, expert_map=None, scatter_idx=None):
    """The signature of vLLM's `ops.moe_align_block_size` (outputs written in place)."""
    if expert_map is not None or scatter_idx is not None:
        raise NotImplementedError("the vLLM baseline runs without expert parallelism: "
                                  "expert_map and scatter_idx are not supported")
    ids = topk_ids.reshape(-1)
    n = ids.numel()
    scratch = torch.zeros(3 * num_experts, dtype=torch.int32, device=ids.device)
    counts, starts, cursor = scratch.split(num_experts)
    block = 1024
    grid = (triton.cdiv(n, block),)
    if n:
        _count_kernel[grid](ids, counts, n, num_experts, BLOCK=block)
    _runs_kernel[(num_experts,)](counts, starts, sorted_ids, expert_ids, num_tokens_post_pad,
                                 n, num_experts, block_size,
                                 E_POW2=triton.next_power_of_2(num_experts),
                                 PAD=triton.next_power_of_2(block_size), FILL=256)
    if n:
        _place_kernel[grid](ids, starts, cursor, sorted_ids, n, num_experts, BLOCK=block)


@triton.jit
def _act_and_mul_kernel(in_ptr, out_ptr, d, stride_in, stride_out, ACT: tl.constexpr,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < d
    g = tl.load(in_ptr + row * stride_in + offs, mask=mask, other=0.0)
    u = tl.load(in_ptr + row * stride_in + d + offs, mask=mask, other=0.0)
    f = g.to(tl.float32)
    if ACT == 0:  # silu
        a = f / (1.0 + tl.exp(-f))
    elif ACT == 1:  # gelu, erf form
        a = f * 0.5 * (1.0 + tl.erf(f * 0.7071067811865476))
    else:  # gelu, tanh form; tanh(z) = 1 - 2 / (exp(2z) + 1)
        z = 0.7978845608028654 * (f + 0.044715 * f * f * f)
        a = 0.5 * f * (2.0 - 2.0 / (tl.exp(2.0 * z) + 1.0))
    a = a.to(g.dtype)
    tl.store(out_ptr + row * stride_out + offs,
             (a.to(tl.float32) * u.to(tl.float32)).to(g.dtype), mask=mask)


def act_and_mul(activation, output, input):
    """output [R, d] = act(input[:, :d]) * input[:, d:] (vLLM's `_C.<act>_and_mul(out, in)`)."""
    rows, d = output.shape
    if rows == 0:
        return output
    block = min(1024, triton.next_power_of_2(d))
    _act_and_mul_kernel[(rows, triton.cdiv(d, block))](
        input, output, d, input.stride(0), output.stride(0),
        ACT=ACTIVATIONS.index(activation), BLOCK=block)
    return output


def moe_sum(input, output):
    """output [T, H] = input [T, top_k, H] summed over top_k (vLLM's `ops.moe_sum`)."""
    top_k = input.shape[1]
    if 2 <= top_k <= 4:
        output.copy_(input[:, 0])
        for k in range(1, top_k):
            output += input[:, k]
        return output
    return torch.sum(input, dim=1, out=output)
