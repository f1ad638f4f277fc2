"""A heterogeneous catalog of textbook SKU types, and each type's reference costs.

Types (every SKU of a type is identical but its id; the type index is the SKU's
`category`): lost sales with mean demand 5, holding h = 1, penalty p in {4, 9, 19, 39},
lead time L in {2, 3, 4}, Poisson and geometric demand of the same mean (Zipkin 2008's
family and its heavy-tailed twin); and perishables of benchmarks/perishable_optimal.py's
family (Poisson mean 3, h = 1, unit cost 2, waste 4, p in {5, 10}, L = 1, shelf life 2, 3).

More: docs/benchmarks.md (benchmarks/hetero_catalog.py)."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from skurl.atomic import write_text
from skurl.catalog.io import write_catalog
from skurl.catalog.schema import DIST_CODES, WEEK, Catalog
from skurl.config import SimConfig
from skurl.policy.tuning import tune

HERE = Path(__file__).resolve().parent
LEADS, PENALTIES, DISTS = (2, 3, 4), (4.0, 9.0, 19.0, 39.0), ("poisson", "geometric")
MORE_LEADS = (1, 6, 8, 10)  # --more-leads
EXACT_MAX_LEAD = 4  # relative value iteration's state space grows as demand^L: none beyond
PERISHABLE_LIVES, PERISHABLE_PENALTIES = (2, 3), (5.0, 10.0)


@dataclasses.dataclass(frozen=True)
class SkuType:
    name: str
    dist: str
    mean: float
    lead: int
    penalty: float
    life: int = 0
    unit_cost: float = 0.0
    waste_cost: float = 0.0


def sku_types(more_leads: bool = False) -> list[SkuType]:
    """The 28 types; more_leads adds Poisson lost sales with L 1 (exact optimum known) and
    L 6, 8, 10 (beyond exact DP: the bar is the type's best capped base-stock)."""
    lost = [SkuType(f"{d[:4]}-L{lead}p{p:g}", d, 5.0, lead, p)
            for d, lead, p in itertools.product(DISTS, LEADS, PENALTIES)]
    if more_leads:
        lost += [SkuType(f"pois-L{lead}p{p:g}", "poisson", 5.0, lead, p)
                 for lead, p in itertools.product(MORE_LEADS, PENALTIES)]
    perish = [SkuType(f"pois-L1p{p:g}m{m}", "poisson", 3.0, 1, p, m, 2.0, 4.0)
              for m, p in itertools.product(PERISHABLE_LIVES, PERISHABLE_PENALTIES)]
    return lost + perish


def type_counts(types: int, per_type: int, skew: float, min_count: int, seed: int) -> np.ndarray:
    """SKUs per type: per_type each (skew 0), or a long tail like a real assortment's: the
    type of rank r (ranks a seeded permutation of the types, so the rare ones are of every
    kind) gets per_type x types x w_r SKUs, w_r proportional to (r + 1)^-skew, at least
    min_count."""
    if skew == 0:
        return np.full(types, per_type, np.int64)
    weight = (np.arange(types) + 1.0) ** -skew
    by_rank = np.maximum(min_count, np.round(per_type * types * weight / weight.sum())).astype(np.int64)
    return by_rank[np.argsort(np.random.default_rng(seed).permutation(types))]


def build_catalog(types: list[SkuType], counts: np.ndarray) -> Catalog:
    """counts[k] identical SKUs of type k, category = the type's index."""
    counts = np.asarray(counts, np.int64)
    n = int(counts.sum())

    def col(attr: str, dtype: type) -> np.ndarray:
        return np.repeat(np.array([getattr(t, attr) for t in types], dtype=dtype), counts)

    zeros = np.zeros(n, np.float32)
    izeros = np.zeros(n, np.int32)
    return Catalog(
        sku_id=np.arange(n, dtype=np.int64), category=np.repeat(np.arange(len(types), dtype=np.int32), counts),
        group=np.full(n, -1, np.int32), sub_frac=zeros, demand_mean=col("mean", np.float32),
        demand_dist=np.repeat(np.array([DIST_CODES[t.dist] for t in types], np.int8), counts),
        dispersion=np.ones(n, np.float32), trend=zeros, promo_uplift=zeros, promo_period=izeros,
        promo_length=izeros, promo_offset=izeros, lead_time=col("lead", np.int32), delay_prob=zeros,
        delay_max=izeros, shelf_life=col("life", np.int32), holding_cost=np.ones(n, np.float32),
        lost_sale_cost=col("penalty", np.float32), order_cost=zeros, unit_cost=col("unit_cost", np.float32),
        waste_cost=col("waste_cost", np.float32), price=zeros, forecast_noise=zeros,
        season=np.ones((n, WEEK), np.float32),
    ).validate()


def exact_optimum(t: SkuType) -> float | None:
    """The type's optimal average cost per day, where a dynamic program is at hand."""
    sys.path.insert(0, str(HERE))
    if t.dist != "poisson" or t.lead > EXACT_MAX_LEAD:
        return None
    if t.life == 0:
        import lost_sales_optimal as lso

        return float(lso.solve(t.lead, t.penalty, margin=2, with_base_stock=False)["optimal_cost"])
    import perishable_optimal as po

    inst = po.Instance(lead=t.lead, life=t.life, penalty=t.penalty)
    args = argparse.Namespace(cap=12, tol=1e-8, simulate=False, skus=0, days=0, warmup=0, train=None)
    return float(po.solve(inst, args)["optimal_cost"])


def tune_types(catalog: Catalog, types: list[SkuType], sim_cfg: SimConfig, eval_seed: int) -> dict[str, dict]:
    """Per type: the capped base-stock (S, r) of skurl's exhaustive search on that type."""
    out = {}
    for k, t in enumerate(types):
        sub = catalog.subset(np.flatnonzero(catalog.category == k))
        tuned = tune("capped-base-stock", sub, sim_cfg, eval_seed=eval_seed, days=200, warmup=50,
                     uniform_skus=500, max_uniform_skus=4000)
        out[t.name] = {"S": float(tuned.params["S"][0]), "r": float(tuned.params["r"][0]),
                       "tuning_cost": float(tuned.objective)}
        print(f"tuned {t.name}: S={out[t.name]['S']:g} r={out[t.name]['r']:g} "
              f"cost {tuned.objective:.4f}", file=sys.stderr, flush=True)
    return out


def references(path: Path, catalog: Catalog, types: list[SkuType], sim_cfg: SimConfig, eval_seed: int,
               exact: bool) -> dict:
    """The cached references of `catalog` (computed and written when missing)."""
    # Each type's references are tuned and solved on that type alone (tune's uniform search
    # simulates its own copies), so they hold for any number of its SKUs: a file of the same
    # types and seed is reused, a skewed catalog's included (--refs-from).
    ref = json.loads(path.read_text()) if path.exists() else {}
    names = [t.name for t in types]
    if ref.get("eval_seed") != eval_seed or ref.get("types", names) != names or "base_stock" not in ref:
        ref = {"eval_seed": eval_seed, "base_stock": tune_types(catalog, types, sim_cfg, eval_seed)}
    ref["skus"] = len(catalog)
    ref["types"] = names  # category k is types[k] (hetero_train.py reads it)
    write_text(path, json.dumps(ref, indent=1))  # the tuning is kept should the optima fail
    if exact and "optimal" not in ref:
        ref["optimal"] = {t.name: exact_optimum(t) for t in types}
        write_text(path, json.dumps(ref, indent=1))
    return ref


def lost_sales_sim() -> SimConfig:
    return SimConfig(days=100, backorders=False, reward="cost", substitution=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/hetero/catalog.parquet", help="catalog file to write")
    ap.add_argument("--per-type", type=int, default=40, help="SKUs per type")
    ap.add_argument("--eval-seed", type=int, default=10_000, help="first held-out seed (tuning avoids it)")
    ap.add_argument("--exact", action="store_true", help="also the exact optima (minutes)")
    ap.add_argument("--more-leads", action="store_true",
                    help="add Poisson lost-sales types with lead times 1, 6, 8 and 10")
    ap.add_argument("--skew", type=float, default=0.0,
                    help="0 = --per-type SKUs of every type; s > 0 = a long tail, type of rank r ~ (r + 1)^-s")
    ap.add_argument("--min-count", type=int, default=10, help="with --skew: the rarest type's SKUs at least")
    ap.add_argument("--seed", type=int, default=0, help="with --skew: which types are rare")
    ap.add_argument("--refs-from", help="a refs.json of the same types to start from (skips their tuning)")
    args = ap.parse_args(argv)
    types = sku_types(args.more_leads)
    counts = type_counts(len(types), args.per_type, args.skew, args.min_count, args.seed)
    catalog = build_catalog(types, counts)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_catalog(catalog, out)
    refs = out.with_suffix(".refs.json")
    if args.refs_from and not refs.exists():
        write_text(refs, Path(args.refs_from).read_text())
    references(refs, catalog, types, lost_sales_sim(), args.eval_seed, args.exact)
    print(f"wrote {out}: {len(types)} types, {counts.min()} to {counts.max()} SKUs each, {len(catalog)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
