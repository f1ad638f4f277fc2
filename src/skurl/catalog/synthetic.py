"""A retailer-like synthetic catalog, generated column by column with numpy (no per-SKU loop).

The shape follows what published retail data shows; figures are rough on purpose:

More: docs/internals.md (catalog/synthetic.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from skurl.catalog.schema import DIST_CODES, WEEK, Catalog
from skurl.config import CatalogConfig, SyntheticConfig
from skurl.errors import CatalogError, ConfigError

# Relative weekly shapes (Monday..Sunday); a category scales one by its amplitude.
WEEKLY_SHAPES = np.array(
    [
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # flat (hardware, health)
        [0.9, 0.85, 0.85, 0.9, 1.05, 1.3, 1.25],  # weekend peak (grocery)
        [0.8, 0.8, 0.85, 0.95, 1.35, 1.4, 0.85],  # Friday/Saturday peak (beverages)
        [1.15, 1.15, 1.1, 1.1, 1.05, 0.75, 0.7],  # weekday peak (office, B2B)
    ]
)
MIN_DEMAND, MAX_DEMAND = 0.01, 20_000.0  # units/day; clip the extreme tails
MAX_TREND = 0.0019  # |daily log-growth| < 0.002
SHELF_LIFE_RANGE = (2, 28)  # days: fresh produce .. dairy, bakery, chilled
SUB_FRAC_RANGE = (0.2, 0.7)
GROUP_SIZES = (2, 6)  # inclusive; mean 4
PROMO_PERIOD = (14, 60)
PROMO_LENGTH = (2, 7)
PROMO_UPLIFT = (0.3, 3.0)
DELAY_PROB = (0.05, 0.3)
DELAY_MAX = (1, 3)
CARRYING_RATE = (0.20, 0.35)  # per year, of unit cost
HANDLING = 0.001  # per unit per day; x3 for perishables (cold chain)
STREAMS = ("categories", "layout", "demand", "season", "supply", "perish", "money", "promo", "forecast")


@dataclass(frozen=True)
class _Categories:
    """Traits of each category (arrays of length C)."""

    weight: np.ndarray  # share of SKUs
    demand_shift: np.ndarray  # log-rate location shift
    cost_level: np.ndarray  # log unit cost location
    margin: np.ndarray  # gross margin on cost
    season: np.ndarray  # [C, 7] weekly profile, mean 1
    perish_score: np.ndarray  # propensity to perish (fresh vs. dry categories)
    promo_score: np.ndarray  # promotion intensity
    negbin_prob: np.ndarray  # share of over-dispersed SKUs
    lead_shift: np.ndarray  # log lead-time shift (near vs. far suppliers)


def _category_traits(rng: np.random.Generator, c: int) -> _Categories:
    weight = rng.lognormal(0.0, 0.8, c)
    shape = WEEKLY_SHAPES[rng.integers(0, len(WEEKLY_SHAPES), c)]
    amplitude = rng.uniform(0.3, 1.2, c)[:, None]
    season = 1.0 + amplitude * (shape - 1.0)
    return _Categories(
        weight=weight / weight.sum(),
        demand_shift=rng.normal(0.0, 0.4, c),
        cost_level=rng.normal(np.log(4.0), 0.9, c),
        margin=rng.uniform(0.15, 0.6, c),
        season=season / season.mean(axis=1, keepdims=True),
        perish_score=rng.normal(0.0, 1.5, c),
        promo_score=rng.normal(0.0, 1.0, c),
        negbin_prob=rng.uniform(0.2, 0.8, c),
        lead_shift=rng.normal(0.0, 0.25, c),
    )


def _layout(
    rng: np.random.Generator, n: int, share: float, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(category, group) per SKU. Units (singletons or groups of 2..6 adjacent SKUs) get
    one category each, so group members are contiguous and share their category."""
    lo, hi = GROUP_SIZES
    mean_size = (lo + hi) / 2
    # P(unit is a group) so that the expected share of SKUs in groups is `share`.
    p_group = share / (mean_size - (mean_size - 1) * share) if share < 1 else 1.0
    size = np.where(rng.random(n) < p_group, rng.integers(lo, hi + 1, n), 1)
    end = np.cumsum(size)
    units = int(np.searchsorted(end, n)) + 1  # the first `units` units cover n SKUs
    size = size[:units]
    size[-1] -= int(end[units - 1]) - n  # truncate the last unit
    is_group = size >= 2
    group_of_unit = np.where(is_group, np.cumsum(is_group) - 1, -1)
    category_of_unit = rng.choice(len(weight), size=units, p=weight)
    return (
        np.repeat(category_of_unit, size).astype(np.int32),
        np.repeat(group_of_unit, size).astype(np.int32),
    )


def _pick(rng: np.random.Generator, share: float, score: np.ndarray) -> np.ndarray:
    """Mask with exactly round(share * n) SKUs, preferring high `score` (plus N(0,1) noise)."""
    n = score.shape[0]
    k = round(share * n)
    mask = np.zeros(n, dtype=bool)
    if k >= n:
        mask[:] = True
    elif k > 0:
        key = score + rng.standard_normal(n)
        mask[np.argpartition(-key, k - 1)[:k]] = True
    return mask


def _demand(
    rng: np.random.Generator, syn: SyntheticConfig, cats: _Categories, category: np.ndarray
) -> dict[str, np.ndarray]:
    n = category.shape[0]
    excess = rng.exponential(syn.demand_tail, n) if syn.demand_tail > 0 else np.zeros(n)
    # Subtract the exponential's median so median_demand stays the body's median.
    log_rate = (
        np.log(syn.median_demand)
        + cats.demand_shift[category]
        + syn.demand_sigma * rng.standard_normal(n)
        + excess
        - syn.demand_tail * np.log(2.0)
    )
    mean = np.clip(np.exp(log_rate), MIN_DEMAND, MAX_DEMAND)
    u = rng.random(n)
    negbin = u < cats.negbin_prob[category]
    geometric = ~negbin & (u > 0.95)  # a few very erratic SKUs (negbin with r = 1)
    dist = np.full(n, DIST_CODES["poisson"], dtype=np.int8)
    dist[negbin] = DIST_CODES["negbin"]
    dist[geometric] = DIST_CODES["geometric"]
    dispersion = np.where(negbin, np.clip(rng.lognormal(np.log(4.0), 0.6, n), 0.5, 100.0), 1.0)
    trend = np.clip(rng.normal(0.0, 0.0007, n), -MAX_TREND, MAX_TREND)
    return {"demand_mean": mean, "demand_dist": dist, "dispersion": dispersion, "trend": trend}


def _season(rng: np.random.Generator, cats: _Categories, category: np.ndarray) -> np.ndarray:
    """[N, 7] weekly profile: the category's, jittered per SKU, mean exactly 1 per row."""
    n = category.shape[0]
    jitter = np.exp(0.05 * rng.standard_normal((n, WEEK), dtype=np.float32))
    season = cats.season[category].astype(np.float32) * jitter
    season /= season.mean(axis=1, keepdims=True)
    return season


def _supply(
    rng: np.random.Generator, syn: SyntheticConfig, cats: _Categories, category: np.ndarray
) -> dict[str, np.ndarray]:
    """Lead times mostly 1-7 days (lognormal around 3), some longer; a share of late suppliers."""
    n = category.shape[0]
    log_lead = np.log(3.0) + cats.lead_shift[category] + 0.55 * rng.standard_normal(n)
    lead = np.clip(np.rint(np.exp(log_lead)), 1, syn.max_lead_time).astype(np.int32)
    late = _pick(rng, syn.supplier_delay_share, np.zeros(n))
    delay_prob = np.where(late, rng.uniform(*DELAY_PROB, n), 0.0)
    delay_max = np.where(late, rng.integers(DELAY_MAX[0], DELAY_MAX[1] + 1, n), 0)
    return {"lead_time": lead, "delay_prob": delay_prob, "delay_max": delay_max}


def _shelf_life(
    rng: np.random.Generator, syn: SyntheticConfig, cats: _Categories, category: np.ndarray
) -> np.ndarray:
    """0 (never expires) or 2..28 days, log-uniform; fresh categories hold most perishables."""
    perishable = _pick(rng, syn.perishable_share, cats.perish_score[category])
    lo, hi = SHELF_LIFE_RANGE
    life = np.rint(np.exp(rng.uniform(np.log(lo), np.log(hi), category.shape[0])))
    return np.where(perishable, np.clip(life, lo, hi), 0).astype(np.int32)


def _money(
    rng: np.random.Generator,
    syn: SyntheticConfig,
    cats: _Categories,
    category: np.ndarray,
    demand_mean: np.ndarray,
    shelf_life: np.ndarray,
) -> dict[str, np.ndarray]:
    n = category.shape[0]
    # Cheaper items sell faster: a mild negative link between log cost and log rate.
    log_cost = (
        cats.cost_level[category]
        + 0.6 * rng.standard_normal(n)
        - 0.1 * (np.log(demand_mean) - np.log(syn.median_demand))
    )
    unit_cost = np.clip(np.exp(log_cost), 0.05, 5000.0)
    margin = np.clip(cats.margin[category] + 0.05 * rng.standard_normal(n), 0.05, 2.0)
    price = unit_cost * (1.0 + margin)
    perishable = shelf_life > 0
    carrying = unit_cost * rng.uniform(*CARRYING_RATE, n) / 365.0
    holding = carrying + HANDLING * np.where(perishable, 3.0, 1.0)
    goodwill = price * rng.uniform(0.05, 0.25, n)
    fixed = _pick(rng, syn.order_cost_share, np.zeros(n))
    order_cost = np.where(fixed, rng.lognormal(np.log(3.0), 0.6, n), 0.0)
    # Disposal of an expired unit (its purchase cost is already spent): 5-20 % of cost.
    waste = np.where(perishable, 0.01 + unit_cost * rng.uniform(0.05, 0.2, n), 0.0)
    return {
        "unit_cost": unit_cost,
        "price": price,
        "holding_cost": holding,
        "lost_sale_cost": (price - unit_cost) + goodwill,
        "order_cost": order_cost,
        "waste_cost": waste,
    }


def _promotions(
    rng: np.random.Generator, syn: SyntheticConfig, cats: _Categories, category: np.ndarray
) -> dict[str, np.ndarray]:
    n = category.shape[0]
    promoted = _pick(rng, syn.promo_share, cats.promo_score[category])
    period = rng.integers(PROMO_PERIOD[0], PROMO_PERIOD[1] + 1, n)
    length = rng.integers(PROMO_LENGTH[0], PROMO_LENGTH[1] + 1, n)
    uplift = np.exp(rng.uniform(np.log(PROMO_UPLIFT[0]), np.log(PROMO_UPLIFT[1]), n))
    offset = (rng.random(n) * period).astype(np.int64)
    return {
        "promo_period": np.where(promoted, period, 0),
        "promo_length": np.where(promoted, length, 0),
        "promo_uplift": np.where(promoted, uplift, 0.0),
        "promo_offset": np.where(promoted, offset, 0),
    }


def _forecast_noise(rng: np.random.Generator, syn: SyntheticConfig, demand_mean: np.ndarray) -> np.ndarray:
    """Around cfg.forecast_noise; slow movers are relatively harder to forecast."""
    slow = np.clip(-np.log10(demand_mean), 0.0, 2.0)  # 0 at >= 1/day, 2 at 0.01/day
    noise = syn.forecast_noise * (1.0 + 0.25 * slow) * rng.lognormal(0.0, 0.3, demand_mean.shape[0])
    return np.clip(noise, 0.0, 5.0)


def synthetic_catalog(cfg: CatalogConfig, skus: int | None = None) -> Catalog:
    """A validated retailer-like catalog of `skus` (default cfg.skus) SKUs, sku_id = 0..n-1.

    Deterministic in (cfg.seed, n, cfg.synthetic); vectorized (about a second per million
    SKUs on one core).
    """
    n = cfg.skus if skus is None else int(skus)
    if n < 1:
        raise CatalogError(f"synthetic catalog: {n} SKUs requested, expected at least 1")
    if cfg.seed < 0:
        raise ConfigError(f"config key 'catalog.seed': got {cfg.seed!r}, expected an integer >= 0")
    syn = cfg.synthetic
    children = np.random.SeedSequence(cfg.seed).spawn(len(STREAMS))
    rngs = {name: np.random.default_rng(child) for name, child in zip(STREAMS, children, strict=True)}
    cats = _category_traits(rngs["categories"], syn.categories)
    category, group = _layout(rngs["layout"], n, syn.substitution_share, cats.weight)
    demand = _demand(rngs["demand"], syn, cats, category)
    shelf_life = _shelf_life(rngs["perish"], syn, cats, category)
    sub_frac = np.where(group >= 0, rngs["layout"].uniform(*SUB_FRAC_RANGE, n), 0.0)
    catalog = Catalog(
        sku_id=np.arange(n, dtype=np.int64),
        category=category,
        group=group,
        sub_frac=sub_frac,
        season=_season(rngs["season"], cats, category),
        shelf_life=shelf_life,
        forecast_noise=_forecast_noise(rngs["forecast"], syn, demand["demand_mean"]),
        **demand,
        **_supply(rngs["supply"], syn, cats, category),
        **_money(rngs["money"], syn, cats, category, demand["demand_mean"], shelf_life),
        **_promotions(rngs["promo"], syn, cats, category),
    ).validate()
    if syn.network == "dc":
        from skurl.catalog.dc_network import dc_network

        return dc_network(catalog, cfg.seed)
    return catalog


def segments(catalog: Catalog, fast: float = 10.0, slow: float = 1.0) -> dict[str, np.ndarray]:
    """Boolean masks for per-segment reports: fast movers (demand_mean >= `fast`/day),
    slow movers (< `slow`/day), the rest (medium), perishables, promoted, substitutable
    and SKUs with a late-prone supplier. Masks overlap except fast/medium/slow."""
    rate = catalog.demand_mean
    return {
        "all": np.ones(len(catalog), dtype=bool),
        "fast": rate >= fast,
        "medium": (rate >= slow) & (rate < fast),
        "slow": rate < slow,
        "perishable": catalog.shelf_life > 0,
        "promoted": catalog.promo_period > 0,
        "substitutable": catalog.group >= 0,
        "supplier_delay": catalog.delay_prob > 0,
    }
