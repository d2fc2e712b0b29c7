"""Property tests (hypothesis) of the plan's invariants on the CPU kernels, for any routing."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_argon


@st.composite
def routings(draw):
    E = draw(st.integers(1, 40))
    T = draw(st.integers(0, 60))
    K = draw(st.integers(1, 12))
    tm = 2 ** draw(st.integers(0, 7))
    ids = draw(st.lists(st.integers(-1, E - 1), min_size=T * K, max_size=T * K))
    return torch.tensor(ids, dtype=torch.int64).view(T, K), E, tm


@settings(max_examples=300, deadline=None)
@given(routings())
def test_plan_invariants(case):
    ids, E, tm = case
    T, K = ids.shape
    w = torch.rand(T, K)
    p = torch_argon.moe_plan(ids, w, E, tm)
    valid = ids >= 0
    n_rows = int(p.offsets[-1])
    # counts and padded offsets
    assert torch.equal(p.counts, torch.bincount(ids[valid], minlength=E).int())
    pad = (p.counts + tm - 1) // tm * tm
    assert torch.equal(p.offsets[1:] - p.offsets[:-1], pad)
    # every valid entry has its own row, inside its expert's range, holding its token and weight
    rows = p.pos[valid].long()
    assert rows.unique().numel() == rows.numel()
    e = ids[valid]
    assert torch.all(rows >= p.offsets[e].long()) and torch.all(rows < (p.offsets[e] + p.counts[e]).long())
    tok = torch.arange(T)[:, None].expand(T, K)[valid]
    assert torch.equal(p.sorted_token[rows].long(), tok)
    assert torch.equal(p.sorted_weight[rows], w[valid])
    # stable: within an expert, rows ascend with the flat index
    for ex in e.unique().tolist():
        r = p.pos.view(-1)[(ids.view(-1) == ex)]
        assert torch.all(r[1:] > r[:-1])
    # everything else is padding; tiles map to their owner
    assert int((p.sorted_token >= 0).sum()) == rows.numel()
    assert torch.all(p.sorted_weight[p.sorted_token < 0] == 0)
    assert torch.all(p.pos[~valid] == -1)
    owner = torch.repeat_interleave(torch.arange(E), pad // tm)
    assert torch.equal(p.tile_expert[: n_rows // tm].long(), owner)
    assert torch.all(p.tile_expert[n_rows // tm:] == -1)
    assert p.meta.tolist() == [n_rows, n_rows // tm, rows.numel(), 0]
