"""The whole decision as one torch module: raw observation -> order units, action, probability.

`Decision` is what `skurl export` turns into ONNX and what `skurl recommend --run` runs in
torch: observation normalization (the checkpoint's running statistics), the policy network,
the greedy choice and the action grid's decoding to units. The greedy choice is
LearnedPolicy's (policy/learned.py): the index of the most probable order *quantity*
(actions that order the same units pool their probability; first index on ties), plain
argmax of the logits on the units grid. Decoding follows ActionGrid (policy/actions.py) op
for op in float64 (an echelon-centred grid from the echelon position and demand that
recommend computes), so the graph's orders are the simulator policy's to the bit wherever
the network's logits are; clipping into [0, MAX_ORDER] as there (NaN orders nothing).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from skurl.policy.actions import SKIP, ActionGrid
from skurl.policy.nets import ActorCritic
from skurl.sim.demand import DIST_GEOMETRIC, DIST_NEGBIN
from skurl.sim.env import MAX_ORDER

# Graph inputs per grid kind, in this order (names are the ONNX input names).
INPUTS = {
    "units": ("obs",),
    "multiplier": ("obs", "forecast"),
    "cover": ("obs", "forecast", "on_hand", "pipeline", "backlog", "day", "cover_days", "demand_dist",
              "dispersion", "z_center", "lot"),
    # the cover grid centred on tuned echelon base-stock (policy/echelon_cover.py): the serving
    # side computes each row's echelon position and demand over its echelon protection days
    "echelon-cover": ("obs", "day", "echelon_mean", "echelon_position", "z_center"),
}
OUTPUTS = ("order_units", "action", "probability")


def decode_kind(grid: ActionGrid) -> str:
    """The decoding a grid's actions need (an INPUTS key): its kind, or "echelon-cover" for a
    cover grid on a tuned echelon centre (as CoverParams.of decides)."""
    echelon = grid.kind == "cover" and grid.z_center == "tuned" and grid.tuned is not None and grid.tuned.echelon
    return "echelon-cover" if echelon else grid.kind


class Decision(nn.Module):
    """One model's decision for a batch of SKUs (see the module docstring)."""

    mean: torch.Tensor  # buffers (registered in __init__)
    inv_std: torch.Tensor
    values: torch.Tensor
    lot_scale: torch.Tensor | None

    def __init__(self, model: ActorCritic, grid: ActionGrid, horizon: int, probabilities: bool = False) -> None:
        super().__init__()
        if grid.kind not in ("units", "multiplier", "cover"):
            raise ValueError(f"action grid kind {grid.kind!r}, expected units, multiplier or cover")
        norm = model.obs_norm
        with torch.no_grad():
            self.register_buffer("mean", norm.mean.to(torch.float32).clone())
            self.register_buffer("inv_std", torch.rsqrt(norm.var + norm.eps).to(torch.float32))
            self.register_buffer("values", torch.as_tensor(np.asarray(grid.values, np.float64)))
            scale = None if grid.lot_scale is None else torch.as_tensor(np.asarray(grid.lot_scale, np.float64))
            self.register_buffer("lot_scale", scale)  # the joint grid's lot factor per action, or None
        self.clip = float(norm.clip)
        self.policy = _frozen(model.policy)
        self.kind = decode_kind(grid)
        self.review_days = int(grid.review_days)
        self.horizon = int(horizon)
        self.probabilities = probabilities

    @property
    def input_names(self) -> tuple[str, ...]:
        return INPUTS[self.kind]

    @property
    def output_names(self) -> tuple[str, ...]:
        return (*OUTPUTS, "probabilities") if self.probabilities else OUTPUTS

    def forward(self, obs: torch.Tensor, *decode: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits, probs, table = self.tables(obs, *decode)
        if table is None:
            action = logits.argmax(dim=-1)
            units = self.values[action]
        else:
            same = (table.unsqueeze(-1) == table.unsqueeze(-2)).to(torch.float64)  # [B, A, A]
            mass = (same * probs.unsqueeze(-2)).sum(-1)
            units = table.gather(1, mass.argmax(dim=-1).unsqueeze(-1)).squeeze(-1)
            # The first action ordering those units, as policy.nets.most_likely_quantity picks:
            # members of one quantity share a mass, but runtimes may sum their rows in other
            # orders (last-bit ties), so argmax over mass alone could name another member.
            action = (table == units.unsqueeze(-1)).to(torch.float32).argmax(dim=-1)
        units = _clip(units)
        probability = probs.gather(1, action.unsqueeze(-1)).squeeze(-1).to(torch.float32)
        out = (units, action, probability)
        return (*out, probs.to(torch.float32)) if self.probabilities else out

    def tables(self, obs: torch.Tensor, *decode: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(logits [B, A], float64 probabilities [B, A], units of every action [B, A] or None on
        the units grid, whose greedy choice is the logits' argmax)."""
        x = ((obs - self.mean) * self.inv_std).clamp(-self.clip, self.clip)
        logits = self.policy(x)
        probs = torch.softmax(logits.double(), dim=-1)
        if self.kind == "units":
            return logits, probs, None
        if self.kind == "multiplier":
            return logits, probs, self._multiplier_table(*decode)
        if self.kind == "cover":
            return logits, probs, self._cover_table(*decode)
        return logits, probs, self._echelon_table(*decode)

    def _multiplier_table(self, forecast: torch.Tensor) -> torch.Tensor:
        base = torch.clamp(forecast[:, 0].double() * float(self.review_days), min=1.0)
        return torch.floor(self.values.unsqueeze(0) * base.unsqueeze(-1) + 0.5)

    def _cover_table(self, forecast: torch.Tensor, on_hand: torch.Tensor, pipeline: torch.Tensor,
                     backlog: torch.Tensor, day: torch.Tensor, cover_days: torch.Tensor, dist: torch.Tensor,
                     dispersion: torch.Tensor, z_center: torch.Tensor, lot: torch.Tensor) -> torch.Tensor:
        """Orders [B, A] of every action (ActionGrid.unit_table): order up to
        ceil(mean + z sigma - 1e-9) over lead + review days, minus the inventory position, plus
        the SKU's lot (x the action's lot factor on a joint grid) where that orders at all (0
        but for a forecast-s-S centre)."""
        mean = torch.zeros_like(dispersion)
        var = torch.zeros_like(dispersion)
        for d in range(self.horizon):  # day order, as protection.cover_moments sums
            m = forecast[:, d].double()
            day_var = torch.where(dist == DIST_GEOMETRIC, m + m * m,
                                  torch.where(dist == DIST_NEGBIN, m + m * m / dispersion, m))
            inside = cover_days > d
            mean = torch.where(inside, mean + m, mean)
            var = torch.where(inside, var + day_var, var)
        zz, level = self._levels(mean, var, z_center)
        position = on_hand.double() + pipeline.sum(dim=1).double() - backlog.double()
        units = torch.clamp(level - position.unsqueeze(-1), min=0.0)
        lots = lot.unsqueeze(-1)
        if self.lot_scale is not None:  # joint grid: round(f_k x lot), as ActionGrid._lots
            lots = torch.floor(self.lot_scale.unsqueeze(0) * lots + 0.5)
        units = units + torch.where(units > 0.0, lots, torch.zeros_like(units))
        return self._skip_and_review(units, zz, day)

    def _echelon_table(self, day: torch.Tensor, mean: torch.Tensor, position: torch.Tensor,
                       z_center: torch.Tensor) -> torch.Tensor:
        """Orders [B, A] of every action on the echelon-centred grid (ActionGrid.unit_table with
        EchelonCover.moments): up to ceil(m c + z sqrt(m c) - 1e-9) on the echelon position, the
        variance of the demand over the echelon protection days being its mean m c."""
        zz, level = self._levels(mean, mean, z_center)
        units = torch.clamp(level - position.unsqueeze(-1), min=0.0)
        return self._skip_and_review(units, zz, day)

    def _levels(self, mean: torch.Tensor, var: torch.Tensor, z_center: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(safety factors [B, A], order-up-to levels [B, A]): baselines.order_up_to_level op for op."""
        zz = self.values.unsqueeze(0) + z_center.unsqueeze(-1)
        level = torch.clamp(torch.ceil(mean.unsqueeze(-1) + zz * torch.sqrt(var).unsqueeze(-1) - 1e-9), min=0.0)
        return zz, level

    def _skip_and_review(self, units: torch.Tensor, zz: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        """Nothing for the skip action, nor on a day that is not a review day."""
        units = torch.where(zz == SKIP, torch.zeros_like(units), units)
        if self.review_days > 1:
            off = (day % self.review_days) != 0
            units = torch.where(off.unsqueeze(-1), torch.zeros_like(units), units)
        return units


def _clip(units: torch.Tensor) -> torch.Tensor:
    """actions.clip_orders: beyond MAX_ORDER -> MAX_ORDER; NaN or negative -> 0."""
    ok = (units >= 0.0) & (units <= MAX_ORDER)
    return torch.where(ok, units, torch.where(units > MAX_ORDER, torch.full_like(units, MAX_ORDER),
                                              torch.zeros_like(units)))


def _frozen(net: nn.Module) -> nn.Module:
    import copy

    out = copy.deepcopy(net).to(torch.float32)
    out.requires_grad_(False)
    out.eval()
    return out
