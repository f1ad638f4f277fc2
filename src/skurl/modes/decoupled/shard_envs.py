"""The env a decoupled collector drives: some sim servers' shards as one Env (docs/architecture.md: Wire formats and services, Modes).

- `assign_shards`: which sim servers (catalog shards) each collector drives; a
  collector's SKUs are the union of whole shards, so substitution groups stay together.
- `GrpcShard`: one shard over gRPC, the transport of sim/replaying.py's ReplayingEnv
  (which records the episode and replays it into a rebuilt shard): when the server is
  lost (killed, restarted) it reconnects to the same address and replays from day 0.
- `CatalogSchemaEnv`: shows the collector's shards with the whole catalog's observation
  schema (a shard sizes some fields from its own SKUs: sim/layout.py), so one network
  serves every collector and a transition's features are the ones the co-located env
  shows; it also sums the business totals of the episode (fill rate, lost, waste, stock).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np

from skurl.config import RpcConfig
from skurl.errors import UserError
from skurl.rpc.env_client import RemoteEnv
from skurl.rpc.env_wire import METRIC_NAMES, schema_from_wire
from skurl.rpc.errors import (
    RequestRejectedError,
    RpcTimeoutError,
    ServerUnavailableError,
    from_rpc_error,
)
from skurl.rpc.gen import skurl_pb2 as pb
from skurl.rpc.gen import skurl_pb2_grpc as pb_grpc
from skurl.rpc.multi_shard import MultiShardEnv
from skurl.rpc.security import open_channel
from skurl.sim.api import Env, Obs, ObsSchema, StepResult
from skurl.sim.replaying import EpisodeLog, ReplayingEnv
from skurl.telemetry.metrics import business_from_totals

log = logging.getLogger("skurl.modes")
_RETRY_PAUSE_S = 0.2
_PROBE_TIMEOUT_S = 5.0


def assign_shards(n_shards: int, n_collectors: int) -> list[list[int]]:
    """Contiguous blocks of shard indices, one block per collector, sizes differing by <= 1."""
    if not 1 <= n_collectors <= n_shards:
        raise UserError(f"deploy.collectors = {n_collectors}: expected 1..{n_shards} (each "
                        "collector drives at least one of deploy.sim_servers)")
    return [list(map(int, b)) for b in np.array_split(np.arange(n_shards), n_collectors)]


def catalog_schema(addresses: Sequence[str], cfg: RpcConfig, timeout_s: float) -> ObsSchema:
    """The whole catalog's observation schema, from every sim server's GetInfo (no session is
    opened): each field as wide as its widest shard, which is the width the whole-catalog
    env has (sim/layout.py takes maxima over SKUs)."""
    schemas = []
    for address in addresses:
        channel = open_channel(address, cfg)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout_s)
            info = pb_grpc.EnvServiceStub(channel).GetInfo(pb.InfoRequest(), timeout=cfg.timeout_s)
        except grpc.FutureTimeoutError:
            raise ServerUnavailableError(f"no sim server answers at {address} within "
                                         f"{timeout_s:g} s", address, None) from None
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, address, "GetInfo") from None
        finally:
            channel.close()
        schemas.append(schema_from_wire(list(info.schema)))
    names = [n for n, _ in schemas[0].fields]
    for address, s in zip(addresses, schemas, strict=True):
        if [n for n, _ in s.fields] != names:
            raise UserError(f"sim server {address}: observation fields differ from "
                            f"{addresses[0]}'s; are they serving the same config?")
    widths = [max(s.fields[j][1] for s in schemas) for j in range(len(names))]
    return ObsSchema(fields=tuple(zip(names, widths, strict=True)))


class GrpcShard:
    """One sim server's shard as a ShardTransport (sim/replaying.py): lost when the server
    is unavailable or times out, or when a restarted server no longer knows our session;
    rebuilt by reconnecting to the same address and replaying. `lean`, `schema`, `raw`:
    the RemoteEnv's (lean replies, features shown in `schema`, the raw state in them)."""

    def __init__(self, address: str, cfg: RpcConfig, reconnect_timeout_s: float = 60.0,
                 connect_timeout_s: float = 30.0, *, lean: bool = False,
                 schema: ObsSchema | None = None, raw: bool = False) -> None:
        self.address = address
        self._cfg = cfg
        self.reconnect_timeout_s = reconnect_timeout_s
        self._shown: dict[str, Any] = {"lean": lean, "schema": schema, "raw": raw}
        self.env = RemoteEnv(address, cfg, connect_timeout_s=connect_timeout_s, **self._shown)
        self.sku_ids = self.env.sku_ids
        self.catalog_rows = self.env.catalog_rows
        self.shard = self.env.shard
        self.days = self.env.days

    @property
    def num_skus(self) -> int:
        return self.env.num_skus

    @property
    def schema(self) -> ObsSchema:
        return self.env.schema

    @property
    def metric_sums(self) -> dict[str, float] | None:
        return self.env.metric_sums

    def reset(self, seed: int, episode: int) -> Obs:
        return self.env.reset(seed, episode)

    def step(self, orders: np.ndarray) -> StepResult:
        return self.env.step(orders)

    def info(self) -> dict[str, Any]:
        return self.env.info()

    def close(self) -> None:
        self.env.close()

    def lost(self, exc: BaseException) -> bool:
        if isinstance(exc, (ServerUnavailableError, RpcTimeoutError)):
            return True
        # A server restarted between two calls answers our old session id with
        # INVALID_ARGUMENT; a real refusal leaves the session in place.
        return isinstance(exc, RequestRejectedError) and not self._session_alive()

    def _session_alive(self) -> bool:
        try:
            self.env.info()
            return True
        except (RequestRejectedError, ServerUnavailableError, RpcTimeoutError):
            return False

    def rebuild(self, episode: EpisodeLog, cause: BaseException) -> None:
        log.warning("sim server %s (shard %d/%d) lost (%s); reconnecting and replaying %d days",
                    self.address, *self.shard, cause, len(episode.orders))
        with contextlib.suppress(Exception):
            self.env.close()
        deadline = time.monotonic() + self.reconnect_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnavailableError(
                    f"sim server {self.address} (shard {self.shard[0]}/{self.shard[1]}) did not "
                    f"come back within deploy.reconnect_timeout_s={self.reconnect_timeout_s:g} s "
                    f"({cause})", self.address, grpc.StatusCode.UNAVAILABLE) from None
            try:
                self.env = self._rebuilt(episode, min(left, _PROBE_TIMEOUT_S))
                break
            except (ServerUnavailableError, RpcTimeoutError):
                time.sleep(min(_RETRY_PAUSE_S, max(deadline - time.monotonic(), 0)))
        log.warning("sim server %s is back; replayed %d days", self.address, len(episode.orders))

    def _rebuilt(self, episode: EpisodeLog, connect_timeout_s: float) -> RemoteEnv:
        env = RemoteEnv(self.address, self._cfg, connect_timeout_s=connect_timeout_s, **self._shown)
        try:
            if env.shard != self.shard or not np.array_equal(env.catalog_rows, self.catalog_rows):
                raise UserError(f"sim server {self.address} came back as shard "
                                f"{env.shard[0]}/{env.shard[1]} with other SKUs, expected shard "
                                f"{self.shard[0]}/{self.shard[1]}")
            if episode.episode is not None:
                env.reset(*episode.episode)
                for orders in episode.orders:
                    env.step(orders)
        except BaseException:
            env.close()
            raise
        return env


def replaying_remote_env(address: str, cfg: RpcConfig, reconnect_timeout_s: float = 60.0,
                         connect_timeout_s: float = 30.0, **shown: Any) -> ReplayingEnv:
    """One sim server's shard that survives the server dying (GrpcShard in ReplayingEnv)."""
    return ReplayingEnv(GrpcShard(address, cfg, reconnect_timeout_s, connect_timeout_s, **shown))


BUSINESS_SUMS = ("demand", "sales", "lost", "waste", "on_hand_end")


class CatalogSchemaEnv:
    """`env`, which shows the catalog's `schema` (sim servers build every shard at the
    catalog's widths: no part widens features), with the episode's business totals, from
    the step's metrics or, when every env of `sums_from` has them, their `metric_sums`
    (lean replies carry sums, not per-SKU metrics)."""

    def __init__(self, env: Env, schema: ObsSchema, sums_from: Sequence[Any] = ()) -> None:
        if env.schema != schema:
            raise UserError(f"a sim server's shard shows {env.schema.dim} features {list(env.schema.fields)}, "
                            f"expected the catalog's {schema.dim} {list(schema.fields)} (same catalog config "
                            "on every server?)")
        self.env = env
        self._sums_from = list(sums_from)
        self._schema = schema
        self.totals: dict[str, float] = {}
        self.days = 0

    @property
    def num_skus(self) -> int:
        return int(self.env.num_skus)

    @property
    def schema(self) -> ObsSchema:
        return self._schema

    @property
    def sku_ids(self) -> np.ndarray:
        return self.env.sku_ids

    def reset(self, seed: int, episode: int = 0) -> Obs:
        self.totals = dict.fromkeys(BUSINESS_SUMS, 0.0)
        self.days = 0
        return self.env.reset(seed, episode)

    def step(self, orders: np.ndarray) -> StepResult:
        result = self.env.step(orders)
        sums: list[Any] = [getattr(e, "metric_sums", None) for e in self._sums_from]
        if not (sums and all(s is not None for s in sums)):
            sums = [dict(zip(METRIC_NAMES, result.metrics.sums().tolist(), strict=True))]
        for name in BUSINESS_SUMS:
            self.totals[name] += sum(s[name] for s in sums)
        self.days += 1
        return result

    def business(self, backorders: bool = False) -> dict[str, float]:
        """The episode so far as report.PolicyResult-like keys (record_business)."""
        return business_from_totals(self.totals, self.num_skus * self.days, backorders)

    def info(self) -> dict[str, Any]:
        return dict(self.env.info(), obs_dim=self._schema.dim)

    def close(self) -> None:
        self.env.close()


def collector_env(addresses: Sequence[str], shards: Sequence[int], cfg: RpcConfig,
                  reconnect_timeout_s: float, connect_timeout_s: float = 30.0, *,
                  lean: bool = True, raw: bool = False) -> tuple[CatalogSchemaEnv, list[ReplayingEnv]]:
    """The env of a collector driving sim servers `shards` of `addresses` (shard order):
    its SKUs shard by shard, with the catalog's schema; and the shard envs. With
    `lean` the servers send only what a collector reads, in the catalog's schema (`raw`:
    and the raw state, for the cover action grid)."""
    schema = catalog_schema(addresses, cfg, connect_timeout_s)
    envs: list[ReplayingEnv] = []
    try:
        for k in shards:
            env = replaying_remote_env(addresses[k], cfg, reconnect_timeout_s, connect_timeout_s,
                                       lean=lean, schema=schema if lean else None, raw=raw and lean)
            envs.append(env)
            if env.shard != (k, len(addresses)):
                raise UserError(f"sim server {addresses[k]} serves shard {env.shard[0]}/"
                                f"{env.shard[1]}, expected {k}/{len(addresses)} (deploy.sim_addresses "
                                "lists the servers in shard order)")
        # Shard after shard: each shard's rows are one contiguous block of the collector's
        # arrays, so merging a reply is a block copy rather than a scatter of every row
        # (the learner places rollout columns by SKU id, in whatever order they come).
        ends = np.cumsum([e.catalog_rows.shape[0] for e in envs])
        local = [np.arange(end - e.catalog_rows.shape[0], end) for e, end in zip(envs, ends, strict=True)]
        merged = MultiShardEnv(envs, local)
        return CatalogSchemaEnv(merged, schema, sums_from=envs if lean else ()), envs
    except BaseException:
        for e in envs:
            e.close()
        raise
