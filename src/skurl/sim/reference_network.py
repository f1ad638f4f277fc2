"""The scalar reference's day for catalogs with supply networks, from docs/networks.md and
independently of sim/network.py: plain loops, the allocation rules written from their
definitions (proportional: largest remainder; fair: the max-min level, then one unit each
in sku_id order; priority: sku_id order). Events: arrivals (on hand since yesterday's
settlement), orders, shipments from the top down, transfers among each upstream's stores
(sim.transfers), customer demand at stores, costs.
"""

from __future__ import annotations

import math

import numpy as np

from skurl.sim.api import STREAM_DELAY, STREAM_DEMAND
from skurl.sim.demand import sample_demand
from skurl.sim.rng import uniform


def topology(skus: list) -> tuple[list[int], list[list[int]], list[int]]:
    """(parent row or -1, children rows by sku_id, rows from the top down) of the SKUs."""
    row_of = {s.p["sku_id"]: i for i, s in enumerate(skus)}
    parent = [row_of[s.p["upstream"]] if s.p.get("upstream", -1) >= 0 else -1 for s in skus]
    children: list[list[int]] = [[] for _ in skus]
    for i in sorted(range(len(skus)), key=lambda i: skus[i].p["sku_id"]):
        if parent[i] >= 0:
            children[parent[i]].append(i)

    def height(i: int) -> int:
        return 1 + max((height(c) for c in children[i]), default=0)

    order = sorted(range(len(skus)), key=lambda i: -height(i))
    return parent, children, order


def allocate(rule: str, requests: list[int], avail: int) -> list[int]:
    """Units shipped per request (in sku_id order) when sum(requests) > avail."""
    total = sum(requests)
    if rule == "priority":
        out = []
        for r in requests:
            out.append(min(r, avail))
            avail -= out[-1]
        return out
    if rule == "proportional":
        exact = [float(avail) * float(r) / float(total) for r in requests]
        out = [min(math.floor(x), r) for x, r in zip(exact, requests, strict=True)]
        left = avail - sum(out)
        ranked = sorted(range(len(requests)), key=lambda k: (-(exact[k] - math.floor(exact[k])), k))
        for k in ranked:
            if left == 0:
                break
            if out[k] < requests[k]:
                out[k] += 1
                left -= 1
        return out
    level = 0  # fair: the largest level L with sum(min(r, L)) <= avail
    while sum(min(r, level + 1) for r in requests) <= avail:
        level += 1
    out = [min(r, level) for r in requests]
    left = avail - sum(out)
    for k, r in enumerate(requests):
        if left > 0 and r > level:
            out[k] += 1
            left -= 1
    return out


def network_day(sim, orders: np.ndarray, take, mean) -> list[dict]:
    """Steps 2-4 of day sim.day for every SKU (take: remove units from a SKU's batches,
    mean: the day's demand mean); returns each SKU's day values for settling."""
    t, cfg = sim.day, sim.cfg
    lifo = cfg.issuing == "lifo"
    parent, children, order = sim.topology
    vals = []
    for i, sku in enumerate(sim.skus):  # 2. orders
        q = math.floor(float(orders[i]) + 0.5)
        vals.append({"q": q, "demand": 0, "sales": 0, "lost": 0, "shipped": 0, "sent": 0})
        p = sku.p
        if parent[i] < 0 and q > 0:
            extra = 0
            if p["delay_max"] > 0 and p["delay_prob"] > 0 and uniform(sku.key, t, STREAM_DELAY, 0) < p["delay_prob"]:
                extra = min(1 + math.floor(uniform(sku.key, t, STREAM_DELAY, 1) * p["delay_max"]), p["delay_max"])
            due = t + p["lead_time"] + extra
            sku.pipeline[due] = sku.pipeline.get(due, 0) + q
    for u in order:  # 3. shipments from the top down
        kids = children[u]
        if not kids:
            continue
        req = [vals[c]["q"] + sim.owed[c] for c in kids]
        have = sim.skus[u].on_hand()
        ship = req if sum(req) <= have else allocate(cfg.upstream_allocation, req, have)
        for c, r, q in zip(kids, req, ship, strict=True):
            sim.owed[c] = 0 if cfg.upstream_shortage == "cancel" else r - q
            vals[c]["shipped"] = q
            if q == 0:
                continue
            kid = sim.skus[c]
            if kid.p["lead_time"] == 0:
                kid.batches.append([t, q])
                kid.arrived_today += q
            else:
                due = t + kid.p["lead_time"]
                kid.pipeline[due] = kid.pipeline.get(due, 0) + q
        take(sim.skus[u], sum(ship), lifo)
        sim.skus[u].backlog = sum(sim.owed[c] for c in kids)
        vals[u].update(demand=sum(req), sales=sum(ship), lost=sum(req) - sum(ship))
    if cfg.transfers.enabled:
        for u in order:  # 3b. transfers among each upstream's stores
            transfers(sim, [c for c in children[u] if not children[c]], vals, lifo, take)
    for i, sku in enumerate(sim.skus):  # 4. customers at the stores
        if children[i]:
            continue
        p = sku.p
        d = int(sample_demand(p["demand_dist"], mean(p, t), p["dispersion"], sku.key, t, STREAM_DEMAND))
        need = sku.backlog + d if cfg.backorders else d
        own = min(need, sku.on_hand())
        take(sku, own, lifo)
        served = min(sku.backlog, own) if cfg.backorders else 0
        lost = d - (own - served)
        if cfg.backorders:
            sku.backlog = sku.backlog - served + lost
        vals[i].update(demand=d, sales=own, lost=lost)
    return vals


def transfers(sim, stores: list[int], vals: list[dict], lifo: bool, take) -> None:
    """Sibling stores' lateral transfers (docs/networks.md, "Transfers"), written from the
    rule: the receivers by (cover, sku_id), each from the senders by (-cover, sku_id)."""
    rule, t = sim.cfg.transfers, sim.day
    give, need, cover = {}, {}, {}
    for c in stores:
        m, have = sim.skus[c].p["demand_mean"], sim.skus[c].on_hand()
        cover[c] = have / m if m > 0 else math.inf
        keep = math.ceil(rule.target * m)
        if have > rule.above * m and have > keep:
            give[c] = have - keep
        elif have < rule.below * m:
            need[c] = keep - have
    sku_id = {c: sim.skus[c].p["sku_id"] for c in stores}
    senders = sorted(give, key=lambda c: (-cover[c], sku_id[c]))
    for to in sorted(need, key=lambda c: (cover[c], sku_id[c])):
        for frm in senders:
            q = min(need[to], give[frm])
            need[to] -= q
            give[frm] -= q
            vals[frm]["sent"] += q
            vals[to]["sent"] -= q
    for c in stores:
        q, kid = vals[c]["sent"], sim.skus[c]
        if q > 0:
            take(kid, q, lifo)
        elif q < 0 and rule.lead_time == 0:
            kid.batches.append([t, -q])
            kid.arrived_today -= q
        elif q < 0:
            due = t + rule.lead_time
            kid.pipeline[due] = kid.pipeline.get(due, 0) - q


def network_costs(sim, i: int, v: dict, waste: int) -> dict:
    """Step 5's costs of SKU i on its end-of-day state (docs/networks.md)."""
    parent, children, _ = sim.topology
    sku = sim.skus[i]
    p = sku.p
    hold = p["holding_cost"] * sku.on_hand()
    if parent[i] >= 0:
        hold += sim.skus[parent[i]].p["holding_cost"] * sum(sku.pipeline.values())
    if not children[i]:
        units = sku.backlog if sim.cfg.backorders else v["lost"]
    else:
        units = v["lost"] if sim.cfg.upstream_shortage == "cancel" else sku.backlog
    return {
        "holding_cost": hold,
        "penalty_cost": p["lost_sale_cost"] * units,
        "purchase_cost": p["unit_cost"] * v["q"] if parent[i] < 0 else 0.0,
        "order_cost": p["order_cost"] if v["q"] > 0 else 0.0,
        "waste_cost": p["waste_cost"] * waste,
        "ship_cost": p["ship_cost"] * v["shipped"] if parent[i] >= 0 else 0.0,
        "transfer_cost": ((sim.cfg.transfers.cost + sim.cfg.transfers.cost_share * p["unit_cost"])
                          * max(v["sent"], 0)),
    }


def network_features(sim, i: int) -> list[float]:
    """Upstream's on hand, pipeline, backlog; echelon position; echelon index (layout.NETWORK_FIELDS)."""
    parent, children, _ = sim.topology
    skus = sim.skus
    inv = 1.0 / max(skus[i].p["demand_mean"], 0.1)

    def units_below(j: int) -> int:
        s = skus[j]
        own = s.on_hand() + sum(s.pipeline.values()) - (0 if children[j] else s.backlog)
        return own + sum(units_below(c) for c in children[j])

    def height(j: int) -> int:
        return 1 + max((height(c) for c in children[j]), default=0)

    u = parent[i]
    up = [0.0, 0.0, 0.0]
    if u >= 0:
        up = [skus[u].on_hand() * inv, sum(skus[u].pipeline.values()) * inv, skus[u].backlog * inv]
    return [*up, (units_below(i) + sim.owed[i]) * inv, float(height(i))]


def shared_reward(sim, reward: np.ndarray) -> np.ndarray:
    """Each SKU's reward replaced by its network's mean (summed upstream first, then by sku_id)."""
    parent, children, _ = sim.topology
    skus = sim.skus

    def root(i: int) -> int:
        return i if parent[i] < 0 else root(parent[i])

    def height(i: int) -> int:
        return 1 + max((height(c) for c in children[i]), default=0)

    members: dict[int, list[int]] = {}
    for i in range(len(skus)):
        members.setdefault(root(i), []).append(i)
    out = reward.copy()
    for rows in members.values():
        rows.sort(key=lambda i: (-height(i), skus[i].p["sku_id"]))
        total = 0.0
        for i in rows:
            total += float(reward[i])
        out[rows] = np.float32(total / len(rows))
    return out
