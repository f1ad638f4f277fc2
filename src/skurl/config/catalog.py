"""The catalog section (`catalog.*`): where SKUs come from and the uniform, synthetic and
serial generators' knobs, each key checked against its catalog column's bounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from skurl.columns import COLUMNS
from skurl.config.loader import check, check_seed, opt, section

DemandDist = Literal["poisson", "geometric", "negbin"]


@dataclass(frozen=True)
class DemandConfig:
    dist: DemandDist = opt("poisson", "demand distribution of a uniform catalog: poisson | geometric | negbin")
    mean: float = opt(5.0, "mean demand per day (uniform catalog)")
    dispersion: float = opt(
        2.0,
        "negative-binomial size r (variance = mean + mean^2 / r); smaller is more erratic",
    )

    def __post_init__(self) -> None:
        check(self.mean >= 0 and self.mean == self.mean, "catalog.demand.mean", self.mean, "a number >= 0")
        check(self.dispersion > 0, "catalog.demand.dispersion", self.dispersion, "a number > 0")


@dataclass(frozen=True)
class SyntheticConfig:
    perishable_share: float = opt(0.2, "share of SKUs that perish (shelf life of days to weeks)")
    substitution_share: float = opt(0.3, "share of SKUs that belong to a substitution group")
    promo_share: float = opt(0.3, "share of SKUs with a promotion calendar")
    categories: int = opt(20, "number of product categories")
    max_lead_time: int = opt(14, "longest supplier lead time in days (lead times are 1..this)")
    supplier_delay_share: float = opt(0.1, "share of SKUs whose supplier is sometimes late")
    forecast_noise: float = opt(0.1, "typical relative error of the demand forecast (lognormal sigma)")
    median_demand: float = opt(0.5, "median of the lognormal body of base demand, units per day")
    demand_sigma: float = opt(1.2, "log-scale spread of the lognormal body of base demand")
    demand_tail: float = opt(
        0.9, "mean log-excess of the fat upper tail (Pareto-like, tail index 1/this); 0 = plain lognormal"
    )
    order_cost_share: float = opt(0.25, "share of SKUs with a fixed cost per order")
    network: Literal["none", "dc"] = opt(
        "none", "none: every SKU-location orders from an outside supplier | dc: each item at one DC (fed by "
        "suppliers) and 2-10 stores fed by it (docs/networks.md)")

    def __post_init__(self) -> None:
        for key in ("perishable_share", "substitution_share", "promo_share", "supplier_delay_share",
                    "order_cost_share"):
            v = getattr(self, key)
            check(0.0 <= v <= 1.0, f"catalog.synthetic.{key}", v, "a share in [0, 1]")
        check(self.categories >= 1, "catalog.synthetic.categories", self.categories, "an integer >= 1")
        check(1 <= self.max_lead_time <= 60, "catalog.synthetic.max_lead_time", self.max_lead_time, "1..60")
        check(0 <= self.forecast_noise <= 5, "catalog.synthetic.forecast_noise", self.forecast_noise, "0..5")
        check(0 < self.median_demand <= 1e4, "catalog.synthetic.median_demand", self.median_demand,
              "a number in (0, 10000]")
        check(0 <= self.demand_sigma <= 5, "catalog.synthetic.demand_sigma", self.demand_sigma, "0..5")
        check(0 <= self.demand_tail <= 3, "catalog.synthetic.demand_tail", self.demand_tail, "0..3")


@dataclass(frozen=True)
class SerialConfig:
    lead_times: list[int] = opt([1, 1], "lead time of the link into stage 1..N (stage 1 = store, N fed by the "
                                "outside supplier), each 0..60; 0 = same day; the outside link >= 1")
    holding: list[float] = opt([2.0, 1.0], "installation holding cost per unit per day of stage 1..N")

    def __post_init__(self) -> None:
        n = len(self.lead_times)
        check(1 <= n <= 3, "catalog.serial.lead_times", list(self.lead_times), "1 to 3 stages")
        check(all(0 <= x <= 60 for x in self.lead_times) and self.lead_times[-1] >= 1,
              "catalog.serial.lead_times", list(self.lead_times), "integers in 0..60, the last >= 1")
        check(len(self.holding) == n and all(x >= 0 for x in self.holding), "catalog.serial.holding",
              list(self.holding), f"{n} numbers >= 0 (one per stage of catalog.serial.lead_times)")


@dataclass(frozen=True)
class CatalogConfig:
    kind: Literal["synthetic", "uniform", "file", "serial"] = opt(
        "synthetic", "where SKUs come from: synthetic (a retailer-like generator) | uniform (identical SKUs, "
        "textbook instances) | file (catalog.path) | serial (catalog.skus copies of a serial supply chain, "
        "catalog.serial; demand, penalty, price from the uniform keys)"
    )
    skus: int = opt(20_000, "number of SKU-locations (synthetic and uniform)")
    path: str | None = opt(None, "Parquet or CSV catalog file (kind=file)")
    seed: int = opt(0, "seed of the synthetic generator (the catalog, not the demand draws)")
    demand: DemandConfig = section(DemandConfig, "demand of a uniform catalog")
    lead_time: int = opt(2, "days from order to availability, >= 1 (uniform catalog)")
    shelf_life: int = opt(0, "days a unit can be sold after arrival; 0 = never expires (uniform)")
    holding_cost: float = opt(1.0, "cost per unit on hand at the end of a day (uniform)")
    lost_sale_cost: float = opt(9.0, "penalty per unit of unmet demand, lost or backordered per day (uniform)")
    order_cost: float = opt(0.0, "fixed cost per order placed (uniform)")
    unit_cost: float = opt(0.0, "purchase cost per unit ordered (uniform)")
    waste_cost: float = opt(0.0, "cost per expired unit, on top of its purchase cost (uniform)")
    price: float = opt(0.0, "revenue per unit sold (uniform)")
    supplier_delay_prob: float = opt(0.0, "probability that an order arrives late (uniform)")
    supplier_delay_max: int = opt(0, "longest extra delay in days of a late order (uniform)")
    synthetic: SyntheticConfig = section(SyntheticConfig, "knobs of the synthetic generator")
    serial: SerialConfig = section(SerialConfig, "catalog.kind=serial: stages of the serial system")

    def __post_init__(self) -> None:
        check(self.skus >= 1, "catalog.skus", self.skus, "an integer >= 1")
        check_seed(self.seed, "catalog.seed")
        check(self.kind != "file" or bool(self.path), "catalog.path", self.path, "a file path when catalog.kind=file")
        check(self.lead_time >= 1, "catalog.lead_time", self.lead_time, "an integer >= 1")
        check(self.shelf_life >= 0, "catalog.shelf_life", self.shelf_life, "an integer >= 0")
        for key in ("holding_cost", "lost_sale_cost", "order_cost", "unit_cost", "waste_cost", "price"):
            v = getattr(self, key)
            check(v >= 0 and v == v, f"catalog.{key}", v, "a number >= 0")
        check(0 <= self.supplier_delay_prob <= 1, "catalog.supplier_delay_prob", self.supplier_delay_prob, "[0, 1]")
        check(self.supplier_delay_max >= 0, "catalog.supplier_delay_max", self.supplier_delay_max, ">= 0")
        check(self.path is None or self.kind == "file", "catalog.path", self.path,
              f"null with catalog.kind={self.kind} (it is read only with catalog.kind=file)")
        check_uniform_bounds(self)


# The uniform keys and the catalog column each fills (catalog/uniform.py): a value outside
# the column's bounds would fail as a row error naming the column, not the key.
UNIFORM_COLUMNS = {
    "demand.mean": "demand_mean", "demand.dispersion": "dispersion", "lead_time": "lead_time",
    "shelf_life": "shelf_life", "holding_cost": "holding_cost", "lost_sale_cost": "lost_sale_cost",
    "order_cost": "order_cost", "unit_cost": "unit_cost", "waste_cost": "waste_cost", "price": "price",
    "supplier_delay_prob": "delay_prob", "supplier_delay_max": "delay_max",
}


def check_uniform_bounds(cfg: CatalogConfig) -> None:
    """Every uniform key within its catalog column's bounds (catalog/schema.py COLUMNS)."""
    bounds = {c.name: c for c in COLUMNS}
    for key, column in UNIFORM_COLUMNS.items():
        col = bounds[column]
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part)
        kind = "an integer" if np.dtype(col.dtype).kind == "i" else "a number"
        check(col.lo <= node <= col.hi, f"catalog.{key}", node, f"{kind} in [{col.lo:g}, {col.hi:g}] ({col.help})")
