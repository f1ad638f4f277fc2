"""`skurl export`: a run's policy as one ONNX graph holding the whole decision (serve/decision.py).

Inputs (dynamic batch axis; which ones depends on the grid, decision.INPUTS): the raw
observation from the feature function, and for decoding the forecast window, on hand,
open orders, backlog, day, and the SKUs' cover days, demand distribution, dispersion and
grid centre (the per-SKU tuned factor, RUN_DIR/grid_center.safetensors, when the run has
one); an echelon-centred grid takes day, echelon position, echelon mean demand and centre
instead (metadata grid.decode = "echelon-cover"). Outputs: order_units (float64), action (int64), probability (float32), and with
--probabilities the whole distribution. Metadata (METADATA keys) names the run, policy
version, observation schema, skurl version and config hash, and carries the run's config
and tuned grid centre so `skurl recommend --model` needs nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import skurl
from skurl.errors import UserError
from skurl.learn.run_policy import policy_of_run
from skurl.policy.actions import ActionGrid
from skurl.policy.grid_center import GridCenter, center_bytes, load_center
from skurl.policy.learned import run_config_file
from skurl.policy.nets import ActorCritic
from skurl.serve.decision import Decision
from skurl.serve.snapshot import Widths
from skurl.sim.layout import Layout, layout_for

log = logging.getLogger("skurl.serve")
PREFIX = "skurl."
OPSET = 18


@dataclass(frozen=True)
class RunModel:
    """A run's decision module and what describes it (the ONNX metadata's contents)."""

    decision: Decision
    widths: Widths
    meta: dict[str, str]
    config_text: str


def load_run_model(run_dir: Path, probabilities: bool = False) -> RunModel:
    """The run's kept policy (learn/run_policy.py's checkpoint) as a Decision + metadata."""
    from skurl.catalog import load_catalog
    from skurl.config import load_config

    cfg_path = run_config_file(run_dir, "--run")
    cfg = load_config(cfg_path)
    policy = policy_of_run(run_dir)
    layout = layout_for(load_catalog(cfg.catalog), cfg.sim.review_days)
    if layout.dim != policy.nets_dim:
        raise UserError(f"--run {run_dir}: its catalog's observation has {layout.dim} features, the network "
                        f"{policy.nets_dim} (model schema mismatch; was catalog.* changed after training?)")
    return build_run_model(policy.model, policy.grid, layout, cfg_path.read_text(), Path(run_dir).resolve().name,
                           str(policy.info["version"]), str(policy.info["checkpoint"]), probabilities)


def build_run_model(model: ActorCritic, grid: ActionGrid, layout: Layout, config_text: str, run_id: str,
                    version: str, checkpoint: str, probabilities: bool = False) -> RunModel:
    widths = Widths(layout.expiring, layout.pipeline, layout.horizon)
    decision = Decision(model, grid, layout.horizon, probabilities).eval()
    meta = {
        "run_id": run_id,
        "policy_version": version,
        "checkpoint": checkpoint,
        "obs_schema": json.dumps(layout.schema.names()),
        "obs_fields": json.dumps([[n, w] for n, w in layout.schema.fields]),
        "widths": json.dumps([widths.expiring, widths.pipeline, widths.horizon]),
        "grid": json.dumps({"kind": grid.kind, "values": [float(v) for v in grid.values],
                            "review_days": grid.review_days, "z_center": grid.z_center,
                            **({} if grid.lot_scale is None else {"lot_scale": grid.lot_scale.tolist()}),
                            **({} if decision.kind == grid.kind else {"decode": decision.kind})}),
        "inputs": json.dumps(list(decision.input_names)),
        "skurl_version": skurl.__version__,
        "config_sha256": hashlib.sha256(config_text.encode()).hexdigest(),
    }
    return RunModel(decision, widths, meta, config_text)


def example_inputs(decision: Decision, widths: Widths, batch: int = 4) -> tuple[torch.Tensor, ...]:
    dim = decision.mean.shape[0]
    arrays = {"obs": torch.zeros(batch, dim), "forecast": torch.ones(batch, widths.horizon),
              "on_hand": torch.zeros(batch, dtype=torch.int64),
              "pipeline": torch.zeros(batch, widths.pipeline, dtype=torch.int64),
              "backlog": torch.zeros(batch, dtype=torch.int64), "day": torch.zeros(batch, dtype=torch.int64),
              "cover_days": torch.ones(batch, dtype=torch.int64), "demand_dist": torch.zeros(batch, dtype=torch.int64),
              "dispersion": torch.ones(batch, dtype=torch.float64), "z_center": torch.zeros(batch, dtype=torch.float64),
              "lot": torch.zeros(batch, dtype=torch.float64), "echelon_mean": torch.ones(batch, dtype=torch.float64),
              "echelon_position": torch.zeros(batch, dtype=torch.float64)}
    return tuple(arrays[name] for name in decision.input_names)


def to_onnx(decision: Decision, widths: Widths) -> Any:
    """The decision as an onnx.ModelProto, its batch axis dynamic."""
    args = example_inputs(decision, widths)
    batch = torch.export.Dim("batch", min=1)
    shapes: tuple[Any, ...] = ({0: batch},)  # forward(obs, *decode): obs, then the decode tuple if any
    if len(args) > 1:
        shapes = ({0: batch}, tuple({0: batch} for _ in args[1:]))
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its notes on optional torchvision ops and axis names are noise here
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(decision, args, input_names=list(decision.input_names),
                                        output_names=list(decision.output_names), dynamic_shapes=shapes,
                                        opset_version=OPSET, dynamo=True, verbose=False)
    finally:
        quiet.setLevel(level)
    return program.model_proto  # type: ignore[union-attr]  # torch types export's result as None or not, whatever dynamo is


def export_run(run_dir: Path, out: Path, *, probabilities: bool = False) -> Path:
    """Write RUN_DIR's policy as one ONNX decision graph to `out` (atomically); returns `out`."""
    run_dir, out = Path(run_dir), Path(out)
    rm = load_run_model(run_dir, probabilities)
    write_onnx(rm, load_center(run_dir), out)
    log.info("exported %s (policy version %s) to %s", run_dir, rm.meta["policy_version"], out)
    return out


def write_onnx(rm: RunModel, center: GridCenter | None, out: Path) -> Path:
    """The decision graph with its metadata (and the tuned centre, when given), checked, to `out`."""
    import onnx

    from skurl import atomic

    model = to_onnx(rm.decision, rm.widths)
    extra = {"config": rm.config_text}
    if center is not None:  # the graph's z_center input comes from it; recommend --model reads it here
        extra["grid_center"] = base64.b64encode(center_bytes(center)).decode()
    for key, value in {**rm.meta, **extra}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = PREFIX + key, value
    model.producer_name, model.producer_version = "skurl", skurl.__version__
    onnx.checker.check_model(model, full_check=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(out, model.SerializeToString())
    return out


def read_metadata(path: Path) -> dict[str, str]:
    """The skurl.* metadata of an ONNX model (prefix stripped)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {p.key[len(PREFIX):]: p.value for p in model.metadata_props if p.key.startswith(PREFIX)}


def widths_from_meta(meta: dict[str, str]) -> Widths:
    a, p, h = json.loads(meta["widths"])
    return Widths(int(a), int(p), int(h))


def obs_names(meta: dict[str, str]) -> list[str]:
    return list(json.loads(meta["obs_schema"]))

