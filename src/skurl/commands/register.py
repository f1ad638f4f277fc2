"""`skurl register`: a trained run enters the MLflow model registry only after a backtest.

The backtest is `skurl eval`'s: the run's policy (its kept best, else its newest checkpoint)
and the tuned forecast-base-stock baseline, each on the run's evaluation SKUs over held-out
seeds (eval.seed, eval.seed + 1, ...; training never uses them) with common random numbers.
The gate compares the objective the run optimized (profit under sim.reward=profit, else
total cost): the run is registered only when its relative improvement over the baseline
exceeds `min_improvement` (0: it must be strictly better). Then the run is exported to
ONNX (skurl.serve.export.export_run), saved in MLflow's onnx flavor, logged to the run's
MLflow run (RUN_DIR/mlflow.json; a new run when there is none on this tracking URI) and
registered under NAME with the backtest figures as model-version tags; `alias` (champion or
challenger) then points at that version."""

from __future__ import annotations

import math
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skurl.config import Config
from skurl.telemetry import tracking

ALIASES = ("champion", "challenger")
BASELINE = "forecast-base-stock"
FIGURES = ("avg_profit_per_sku_day", "avg_cost_per_sku_day", "avg_inventory_cost_per_sku_day", "fill_rate")
Export = Callable[..., Path]


@dataclass(frozen=True)
class Backtest:
    objective: str  # "profit" or "cost"
    policy: dict[str, Any]  # EvalResult.to_json() of the run's policy
    baseline: dict[str, Any]  # ... of the tuned baseline
    improvement: float  # relative gain in the objective (> 0: the run is better)

    def tags(self) -> dict[str, str]:
        """The figures as registry tags (strings): backtest.<who>.<figure>."""
        out = {"backtest.objective": self.objective, "backtest.baseline": BASELINE,
               "backtest.improvement": f"{self.improvement:.6g}",
               "backtest.seeds": ",".join(str(s) for s in self.policy["seeds"]),
               "backtest.days": str(self.policy["days"]), "backtest.warmup": str(self.policy["warmup"]),
               "backtest.skus": str(self.policy["skus"])}
        for who, result in (("policy", self.policy), ("baseline", self.baseline)):
            for key in FIGURES:
                out[f"backtest.{who}.{key}"] = f"{result[key]:.6g}"
        return out


def run_backtest(run_dir: Path, cfg: Config, *, episodes: int) -> Backtest:
    """The run's policy and the tuned baseline on held-out seeds, through `skurl eval`'s code."""
    import dataclasses

    from skurl.catalog import load_catalog
    from skurl.collect.evaluate import eval_subset, evaluate, make_env
    from skurl.commands.eval_cmd import feature_widths, resolve_policy

    full = load_catalog(cfg.catalog)
    catalog = eval_subset(full, cfg.eval.skus)
    env = make_env(catalog, dataclasses.replace(cfg.sim, days=cfg.eval.warmup + cfg.eval.days),
                   feature_widths(full, str(run_dir)))
    results = {}
    for who, flags in (("policy", {"run": str(run_dir), "policy": None, "tune": False}),
                       ("baseline", {"run": None, "policy": BASELINE, "tune": True})):
        policy, _ = resolve_policy(types.SimpleNamespace(**flags), cfg, catalog)
        results[who] = evaluate(catalog, cfg.sim, policy, days=cfg.eval.days, warmup=cfg.eval.warmup,
                                seed=cfg.eval.seed, episodes=episodes, env=env).to_json()
    objective = "profit" if cfg.sim.reward == "profit" else "cost"
    mine, theirs = (results[w][f"avg_{objective}_per_sku_day"] for w in ("policy", "baseline"))
    gain = (mine - theirs) if objective == "profit" else (theirs - mine)
    improvement = gain / abs(theirs) if theirs else (math.copysign(math.inf, gain) if gain else 0.0)
    return Backtest(objective, results["policy"], results["baseline"], improvement)


def default_export(run_dir: Path, out: Path) -> Path:
    """skurl.serve.export.export_run, imported only when a model is registered."""
    from skurl.serve.export import export_run

    return export_run(run_dir, out)


def register_model(run_dir: Path, cfg: Config, backtest: Backtest, *, name: str, alias: str | None,
                   export: Export = default_export) -> dict[str, Any]:
    """Export the run to ONNX, log it to the run's MLflow run and register it under `name`
    with the backtest's tags; the new version, its source and the alias."""
    import onnx
    from mlflow.onnx import save_model

    from skurl.config import config_to_dict

    run = tracking.open_run(cfg.tracking, run_dir, name=run_dir.name,
                            params=tracking.flatten(config_to_dict(cfg)))
    ok = False
    try:
        with tempfile.TemporaryDirectory(prefix="skurl-register-") as tmp:
            onnx_file = export(run_dir, Path(tmp) / "model.onnx")
            model_dir = Path(tmp) / "model"
            save_model(onnx.load(str(onnx_file)), str(model_dir), pip_requirements=["onnx", "onnxruntime"],
                       save_as_external_data=False)
            run.client.log_artifacts(run.run_id, str(model_dir), artifact_path="model")
        run.log_metrics({f"backtest/{k.removeprefix('backtest.')}": float(v) for k, v in backtest.tags().items()
                         if _is_number(v)})
        version = _create_version(run, name, backtest.tags())
        if alias is not None:
            run.client.set_registered_model_alias(name, alias, version.version)
        ok = True
    finally:
        run.end(ok)
    return {"name": name, "version": int(version.version), "alias": alias, "run_id": run.run_id,
            "source": version.source, "tracking_uri": tracking.tracking_uri(cfg.tracking)}


def _create_version(run: tracking.MlflowRun, name: str, tags: dict[str, str]) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        run.client.create_registered_model(name)
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
            raise
    return run.client.create_model_version(name, source=f"runs:/{run.run_id}/model", run_id=run.run_id,
                                           tags=tags)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
