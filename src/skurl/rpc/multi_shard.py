"""MultiShardEnv: several shard envs (in-process or remote) as one Env over the catalog.

Orders are scattered to the shards by row index, the shards step concurrently (threads:
gRPC and the numba kernels release the GIL), and observations, rewards and metrics are
gathered back in the catalog's row order, so a collector sees one Env of N SKUs.

More: docs/internals.md (rpc/multi_shard.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from skurl.errors import UserError
from skurl.sim.api import (
    ActionError,
    DayMetrics,
    Env,
    EnvStateError,
    Obs,
    ObsSchema,
    RawState,
    StepResult,
)

if TYPE_CHECKING:
    from skurl.config import Config, RpcConfig

T = TypeVar("T")
Selector = slice | np.ndarray
Columns = list[tuple[int, int, int]] | None  # (dst start, src start, width) per field


def _selector(rows: np.ndarray) -> Selector:
    """A slice when the rows are one contiguous run (an 'equal' partition): cheaper copies."""
    if rows.size and rows[-1] - rows[0] + 1 == rows.size and np.all(np.diff(rows) == 1):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _check_rows(envs: Sequence[Env], index_maps: Sequence[np.ndarray]) -> list[np.ndarray]:
    if not envs:
        raise UserError("MultiShardEnv: no shard envs given (expected at least one)")
    if len(envs) != len(index_maps):
        raise UserError(f"MultiShardEnv: {len(envs)} envs but {len(index_maps)} index maps")
    rows = []
    for k, (env, m) in enumerate(zip(envs, index_maps, strict=True)):
        r = np.asarray(m)
        if r.ndim != 1 or r.dtype.kind not in "iu" or r.shape[0] != env.num_skus:
            raise UserError(f"MultiShardEnv: index map {k} has shape {r.shape} of {r.dtype}, "
                            f"expected ({env.num_skus},) integers (one catalog row per shard SKU)")
        rows.append(r.astype(np.int64))
    n = sum(r.shape[0] for r in rows)
    seen = np.zeros(n, np.int64)
    for r in rows:
        if r.size and (r.min() < 0 or r.max() >= n):
            raise UserError(f"MultiShardEnv: index maps hold rows outside 0..{n - 1}")
        np.add.at(seen, r, 1)
    if not np.all(seen == 1):
        i = int(np.argmax(seen != 1))
        raise UserError(f"MultiShardEnv: catalog row {i} is in {int(seen[i])} shards, "
                        "expected exactly one")
    return rows


def _merge_schemas(schemas: Sequence[ObsSchema]) -> tuple[ObsSchema, list[Columns]]:
    names = [name for name, _ in schemas[0].fields]
    for k, s in enumerate(schemas):
        if [name for name, _ in s.fields] != names:
            raise UserError(f"MultiShardEnv: shard {k} observation fields "
                            f"{[n for n, _ in s.fields]} differ from shard 0's {names}")
    widths = [max(s.fields[j][1] for s in schemas) for j in range(len(names))]
    merged = ObsSchema(fields=tuple(zip(names, widths, strict=True)))
    columns: list[Columns] = []
    for s in schemas:
        if s == merged:
            columns.append(None)
            continue
        cols, dst, src = [], 0, 0
        for (_, w), wide in zip(s.fields, widths, strict=True):
            if w:
                cols.append((dst, src, w))
            dst, src = dst + wide, src + w
        columns.append(cols)
    return merged, columns


class MultiShardEnv:
    """One Env over the union of shard envs; `index_maps[k][j]` = catalog row of SKU j of
    shard k. Every catalog row must be in exactly one shard."""

    def __init__(self, envs: Sequence[Env], index_maps: Sequence[np.ndarray], *,
                 concurrent: bool = True) -> None:
        self._rows = _check_rows(envs, index_maps)
        self._envs = list(envs)
        self._sel = [_selector(r) for r in self._rows]
        self._n = sum(r.shape[0] for r in self._rows)
        self._schema, self._columns = _merge_schemas([e.schema for e in self._envs])
        whole = slice(0, self._n)
        self._direct = (len(self._envs) == 1 and self._columns[0] is None
                        and isinstance(self._sel[0], slice) and self._sel[0] == whole)
        use_threads = concurrent and len(self._envs) > 1
        self._pool = ThreadPoolExecutor(len(self._envs), "shard") if use_threads else None
        self._buf: dict[str, np.ndarray] = {}
        self._wide: dict[str, int] = {}
        self._owed = False  # some shard has supply networks (its raw state carries owed)
        self._day = -1
        self._in_step = False  # True while shards may disagree (a step failed midway)

    @classmethod
    def from_addresses(cls, addresses: Sequence[str], cfg: RpcConfig | None = None, *,
                       env_id: str | None = None, **kwargs: Any) -> MultiShardEnv:
        """RemoteEnvs on every sim server of `addresses` (shard order), merged; checks that
        the servers are shards 0..n-1 of the same n."""
        from skurl.rpc.env_client import RemoteEnv

        envs: list[Any] = []
        try:
            for address in addresses:
                envs.append(RemoteEnv(address, cfg, env_id=env_id, **kwargs))
            shards = sorted(e.shard for e in envs)
            expected = [(i, len(addresses)) for i in range(len(addresses))]
            if shards != expected:
                got = ", ".join(f"{e.address}={e.shard[0]}/{e.shard[1]}" for e in envs)
                raise UserError(f"sim servers are not shards 0..{len(addresses) - 1} of "
                                f"{len(addresses)}: {got}")
            return cls(envs, [e.catalog_rows for e in envs])
        except BaseException:
            for e in envs:
                e.close()
            raise

    # ---------------------------------------------------------------- Env protocol
    @property
    def num_skus(self) -> int:
        return self._n

    @property
    def schema(self) -> ObsSchema:
        return self._schema

    @property
    def envs(self) -> list[Env]:
        return list(self._envs)

    @property
    def sku_ids(self) -> np.ndarray:
        """SKU ids in catalog row order, from every shard's own."""
        out = np.empty(self._n, np.int64)
        for sel, env in zip(self._sel, self._envs, strict=True):
            out[sel] = env.sku_ids
        return out

    def reset(self, seed: int, episode: int = 0) -> Obs:
        self._in_step = True
        if self._direct:
            obs = self._envs[0].reset(seed, episode)
            self._day, self._in_step = int(obs.raw.day), False
            return obs
        shard_obs = self._map(lambda k: self._envs[k].reset(seed, episode))
        # Raw widths are known only now; the widest shard sets the merged arrays' width.
        self._wide = {attr: max(getattr(o.raw, attr).shape[1] for o in shard_obs)
                      for attr in ("pipeline", "forecast")}
        # Supply networks: owed merged where any shard has it (a shard without reads as 0 owed).
        self._owed = any(o.raw.owed is not None for o in shard_obs)
        self._prepare_obs(shard_obs[0])
        self._map(lambda k: self._gather_obs(k, shard_obs[k]))
        days = {int(o.raw.day) for o in shard_obs}
        if len(days) != 1:
            raise EnvStateError(f"MultiShardEnv: shards reset to different days {sorted(days)}")
        self._day, self._in_step = days.pop(), False
        return self._obs()

    def step(self, orders: np.ndarray) -> StepResult:
        if self._in_step:
            raise EnvStateError("MultiShardEnv: a previous reset/step failed on some shard, "
                                "so the shards are out of step; call reset()")
        arr = self._check_orders(orders)
        if self._direct:
            self._in_step = True
            result = self._envs[0].step(arr)
            self._day, self._in_step = int(result.obs.raw.day), False
            return result

        def gather(k: int) -> tuple[int, bool]:
            self._gather_obs(k, results[k].obs)
            self._gather_step(k, results[k])
            return int(results[k].obs.raw.day), bool(results[k].done)

        self._in_step = True
        results = self._map(lambda k: self._envs[k].step(arr[self._sel[k]]))
        self._prepare_step(results[0])
        outcomes = self._map(gather)
        if len(set(outcomes)) != 1:
            raise EnvStateError(f"MultiShardEnv: shards disagree on (day, done): {outcomes}")
        self._day, done = outcomes[0]
        self._in_step = False
        b = self._buf
        metrics = DayMetrics(**{name: b[name] for name in DayMetrics.__dataclass_fields__})
        return StepResult(obs=self._obs(), reward=b["reward"], done=done, metrics=metrics,
                          failed=b["failed"])

    def info(self) -> dict[str, Any]:
        shards = self._map(lambda k: self._envs[k].info())
        return {"backend": "multi_shard", "num_skus": self._n, "obs_dim": self._schema.dim,
                "days": shards[0].get("days"), "day": self._day, "shards": shards}

    def close(self) -> None:
        for env in self._envs:
            env.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> MultiShardEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals
    def _map(self, fn: Callable[[int], T]) -> list[T]:
        """fn(k) for every shard, concurrently; the first error is raised after all end."""
        ks = range(len(self._envs))
        if self._pool is None:
            return [fn(k) for k in ks]
        futures: list[Future[T]] = [self._pool.submit(fn, k) for k in ks]
        errors = [f.exception() for f in futures]
        for exc in errors:
            if exc is not None:
                raise exc
        return [f.result() for f in futures]

    def _check_orders(self, orders: np.ndarray) -> np.ndarray:
        """Whole-batch checks first, so a bad order never steps some shards and not others."""
        arr = np.asarray(orders)
        if arr.shape != (self._n,) or arr.dtype.kind not in "iuf":
            raise ActionError(f"orders: shape {arr.shape} of {arr.dtype}, expected ({self._n},) "
                              "numbers (one order per SKU)")
        if arr.dtype.kind == "f" and not (np.isfinite(arr).all() and arr.min(initial=0) >= 0):
            i = int(np.argmax(~np.isfinite(arr) | (arr < 0)))
            raise ActionError(f"orders: row {i} = {arr[i]!r}, expected a finite number >= 0")
        if arr.dtype.kind == "i" and arr.min(initial=0) < 0:
            i = int(np.argmin(arr))
            raise ActionError(f"orders: row {i} = {arr[i]!r}, expected a number >= 0")
        return arr

    def _alloc(self, name: str, like: np.ndarray, width: int | None = None) -> None:
        """(Re)allocate a merged array; on the calling thread only, never in the workers
        (two workers allocating the same name would each write into its own array)."""
        shape = (self._n,) if width is None else (self._n, width)
        buf = self._buf.get(name)
        if buf is None or buf.shape != shape or buf.dtype != like.dtype:
            self._buf[name] = np.zeros(shape, like.dtype)

    def _prepare_obs(self, obs: Obs) -> None:
        self._alloc("features", obs.features, self._schema.dim)
        for attr in ("on_hand", "backlog"):
            self._alloc(attr, getattr(obs.raw, attr))
        for attr in ("pipeline", "forecast"):
            self._alloc(attr, getattr(obs.raw, attr), self._wide[attr])
        if self._owed:
            self._alloc("owed", np.zeros(0, np.int64))

    def _prepare_step(self, result: StepResult) -> None:
        self._alloc("reward", result.reward)
        for name in DayMetrics.__dataclass_fields__:
            self._alloc(name, getattr(result.metrics, name))
        self._alloc("failed", np.zeros(0, bool))

    def _gather_obs(self, k: int, obs: Obs) -> None:
        sel, cols, raw, b = self._sel[k], self._columns[k], obs.raw, self._buf
        if cols is None:
            b["features"][sel] = obs.features
        else:
            for dst, src, w in cols:
                b["features"][sel, dst:dst + w] = obs.features[:, src:src + w]
        b["on_hand"][sel] = raw.on_hand
        b["backlog"][sel] = raw.backlog
        if raw.owed is not None:
            b["owed"][sel] = raw.owed
        for attr in ("pipeline", "forecast"):
            part = getattr(raw, attr)
            b[attr][sel, :part.shape[1]] = part

    def _gather_step(self, k: int, result: StepResult) -> None:
        sel, b = self._sel[k], self._buf
        b["reward"][sel] = result.reward
        for name in DayMetrics.__dataclass_fields__:
            b[name][sel] = getattr(result.metrics, name)
        failed = np.asarray(result.failed)
        mask = b["failed"]
        if failed.shape == (self._rows[k].shape[0],):
            mask[sel] = failed
        elif failed.size:  # not a per-row mask: the Env contract says failed is one
            raise EnvStateError(f"MultiShardEnv: shard {k} returned failed of shape "
                                f"{failed.shape}, expected a mask of its {mask.shape} rows")

    def _obs(self) -> Obs:
        b = self._buf
        raw = RawState(on_hand=b["on_hand"], pipeline=b["pipeline"], backlog=b["backlog"],
                       forecast=b["forecast"], day=self._day, owed=b["owed"] if self._owed else None)
        return Obs(features=b["features"], raw=raw, schema=self._schema)


def connect_sim_servers(cfg: Config, env_id: str | None = None, **kwargs: Any) -> MultiShardEnv:
    """One Env over the sim servers of a config: deploy.sim_addresses, or, when empty,
    127.0.0.1 on base_port .. base_port + sim_servers - 1 (servers started locally)."""
    deploy = cfg.deploy
    addresses = list(deploy.sim_addresses) or [
        f"127.0.0.1:{deploy.base_port + i}" for i in range(deploy.sim_servers)]
    return MultiShardEnv.from_addresses(addresses, cfg.rpc, env_id=env_id, **kwargs)
