"""The MoEPlan named tuple: the output of moe_plan, consumed by gather, moe_mm and combine."""
from typing import NamedTuple

import torch

from ._shapes import META_N_BAD_IDS, META_N_ROWS, META_N_TILES, META_N_VALID


class MoEPlan(NamedTuple):
    """Where each (token, slot) entry of a top-k routing goes in the expert-sorted row space.

    Fields follow docs/contract.md: ``counts [E]``, ``offsets [E+1]``, ``sorted_token [R_max]``,
    ``sorted_weight [R_max]`` (float32), ``pos [T, K]``, ``tile_expert [R_max / tile_m]``,
    ``meta [4]`` (n_rows, n_tiles, n_valid_entries, n_bad_ids), all int32 but sorted_weight;
    plus ``tile_m``, the rows per tile the plan was made for.
    """

    counts: torch.Tensor
    offsets: torch.Tensor
    sorted_token: torch.Tensor
    sorted_weight: torch.Tensor
    pos: torch.Tensor
    tile_expert: torch.Tensor
    meta: torch.Tensor
    tile_m: int

    # Reading these syncs with the device: meant for tests and reports, not the hot path.
    @property
    def n_rows(self) -> int:
        return int(self.meta[META_N_ROWS])

    @property
    def n_tiles(self) -> int:
        return int(self.meta[META_N_TILES])

    @property
    def n_valid(self) -> int:
        return int(self.meta[META_N_VALID])

    @property
    def n_bad_ids(self) -> int:
        return int(self.meta[META_N_BAD_IDS])

    def tensors(self):
        """The seven tensors, in contract order (what the moe_plan op returns)."""
        return tuple(self)[:7]

    def to(self, device):
        """The same plan with its tensors on `device`."""
        return MoEPlan(*(t.to(device) for t in self.tensors()), self.tile_m)
