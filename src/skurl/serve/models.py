"""The two runners of a decision: the exported ONNX graph (onnxruntime, CPU) and the run's
torch module (serve/decision.py). Both take the same named inputs and give the same outputs,
in batches of rows; `ModelInfo` is what recommend needs to know about either.
"""

from __future__ import annotations

import base64
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from skurl.config import Config, load_config
from skurl.errors import UserError
from skurl.policy.grid_center import GridCenter, center_from_bytes, load_center
from skurl.policy.nets import input_tensor
from skurl.serve.snapshot import Widths
from skurl.sim.layout import NETWORK_FIELDS

BATCH = 16_384  # rows per call: LearnedPolicy's chunk, so torch sees the simulator's shapes


@dataclass(frozen=True)
class ModelInfo:
    widths: Widths
    obs_names: list[str]
    grid: dict[str, Any]  # kind, values, review_days, z_center (decode where it is not the kind)
    policy_version: str
    cfg: Config
    center: GridCenter | None
    source: str  # what to name in messages

    @property
    def decode(self) -> str:
        """The graph's decoding (a decision.INPUTS key): the grid's kind unless the metadata
        names another ("echelon-cover"; models exported before it name none)."""
        return str(self.grid.get("decode", self.grid["kind"]))

    @property
    def network(self) -> bool:
        """Trained on a catalog with supply networks: its observation ends with NETWORK_FIELDS."""
        tail = [name for name, _ in NETWORK_FIELDS]
        return self.obs_names[-len(tail):] == tail


def config_from_text(text: str, where: str) -> Config:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(text)
        try:
            return load_config(path)
        except UserError as e:
            raise UserError(f"{where}: its embedded config does not load with this skurl ({e})") from e


class OnnxModel:
    """An exported decision graph run by onnxruntime on CPU."""

    def __init__(self, path: Path, threads: int = 0) -> None:
        import onnxruntime as ort

        from skurl.serve.export import read_metadata, widths_from_meta

        path = Path(path)
        if not path.is_file():
            raise UserError(f"--model {path}: no such file (expected an ONNX file from `skurl export`)")
        try:
            meta = read_metadata(path)
        except Exception as e:  # onnx raises its own DecodeError types
            raise UserError(f"--model {path}: not a readable ONNX model ({str(e).splitlines()[0]})") from e
        need = ("widths", "obs_schema", "grid", "policy_version", "config")
        if any(k not in meta for k in need):
            raise UserError(f"--model {path}: no skurl metadata {[k for k in need if k not in meta]} "
                            "(expected a model written by `skurl export`)")
        center = meta.get("grid_center")
        self.info = ModelInfo(widths_from_meta(meta), json.loads(meta["obs_schema"]), json.loads(meta["grid"]),
                              meta["policy_version"], config_from_text(meta["config"], f"--model {path}"),
                              None if not center else center_from_bytes(base64.b64decode(center), f"--model {path}"),
                              f"--model {path}")
        opts = ort.SessionOptions()
        if threads > 0:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]

    def run(self, inputs: dict[str, np.ndarray], batch: int = BATCH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = inputs["obs"].shape[0]
        units, action, prob = np.empty(n, np.float64), np.empty(n, np.int64), np.empty(n, np.float32)
        for s in range(0, n, batch):
            feed = {k: inputs[k][s:s + batch] for k in self.input_names}
            u, a, p = self.session.run(["order_units", "action", "probability"], feed)[:3]
            units[s:s + batch], action[s:s + batch], prob[s:s + batch] = u, a, p
        return units, action, prob


class TorchModel:
    """A run's kept policy as the torch Decision module (what the ONNX graph is made from)."""

    def __init__(self, run_dir: Path) -> None:
        from skurl.serve.export import load_run_model

        rm = load_run_model(Path(run_dir))
        self.decision = rm.decision.eval()
        m = rm.meta
        self.info = ModelInfo(rm.widths, json.loads(m["obs_schema"]), json.loads(m["grid"]), m["policy_version"],
                              config_from_text(rm.config_text, f"--run {run_dir}"), load_center(run_dir),
                              f"--run {run_dir}")
        self.input_names = list(self.decision.input_names)

    @torch.inference_mode()
    def run(self, inputs: dict[str, np.ndarray], batch: int = BATCH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = inputs["obs"].shape[0]
        units, action, prob = np.empty(n, np.float64), np.empty(n, np.int64), np.empty(n, np.float32)
        tensors = [input_tensor(np.ascontiguousarray(inputs[k])) for k in self.input_names]  # read-only snapshot columns
        for s in range(0, n, batch):
            u, a, p = self.decision(*(t[s:s + batch] for t in tensors))[:3]
            units[s:s + batch], action[s:s + batch], prob[s:s + batch] = u.numpy(), a.numpy(), p.numpy()
        return units, action, prob


def as_tensor(arr: np.ndarray) -> torch.Tensor:
    """A CPU tensor over `arr` (no copy when it is contiguous and writable): torch warns
    "The given NumPy array is not writable" for read-only arrays (features decoded from
    buffers), so those are copied (issue 42, defect 13)."""
    out = np.ascontiguousarray(arr)
    return torch.from_numpy(out if out.flags.writeable else out.copy())


def open_model(model: Path | None, run: Path | None, threads: int = 0) -> OnnxModel | TorchModel:
    if (model is None) == (run is None):
        raise UserError("skurl recommend: give exactly one of --model FILE.onnx or --run RUN_DIR")
    return OnnxModel(model, threads) if model is not None else TorchModel(run)  # type: ignore[arg-type]
