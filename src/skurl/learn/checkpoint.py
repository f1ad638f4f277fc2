"""Checkpoints: everything needed to continue a run exactly as if it never stopped.

Layout: RUN_DIR/checkpoints/iter_XXXXXX/{state.safetensors, meta.json}. Tensors
(weights, optimizer moments, normalizers, RNG states as uint8) go to safetensors; plain
values (iteration, policy version, optimizer hyper-parameters, RNG scalars) to JSON.
Never pickle: nothing here can execute code when loaded. A checkpoint is written in a
temporary directory and renamed into place, so a crash leaves either the old set or
the new one; only the last `keep` are kept. meta.json holds the sha256 of the tensor file,
checked on every load: a damaged checkpoint is an error, never weights that load fine and
are wrong (safetensors checks its header, not the data). A resume skips damaged ones
(restore_latest): they are renamed aside and the newest intact one is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from skurl.errors import UserError

if TYPE_CHECKING:
    from skurl.learn.learner import Learner

FORMAT = "skurl-checkpoint/1"
STATE_FILE = "state.safetensors"
META_FILE = "meta.json"
PREFIX = "iter_"
DAMAGED_PREFIX = "damaged."  # a checkpoint restore_latest could not read, kept for inspection
SHA_KEY = "state_sha256"


class CheckpointError(UserError):
    """A checkpoint directory is missing, incomplete or not a skurl checkpoint."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint's files are not what was written (checksum, unreadable file)."""


BEST_DIR = "best"  # RUN_DIR/best/checkpoints: the policy train.keep_best keeps (train/best.py)


def best_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint train.keep_best kept for RUN_DIR, if any."""
    return latest_checkpoint(Path(run_dir) / BEST_DIR)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _iter_dirs(run_dir: str | Path) -> list[Path]:
    """The run's checkpoints/iter_XXXXXX directories, complete or not."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    found = [p for p in _iter_dirs(run_dir) if (p / META_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def refuse_existing(run_dir: str | Path) -> None:
    """A new run must not start in a directory with checkpoints, complete or not: its
    saves would replace them (one error for every mode)."""
    if _iter_dirs(run_dir):
        raise UserError(f"run dir '{run_dir}' already holds checkpoints; use --resume {run_dir} or another --run-dir")


def no_checkpoint_error(run_dir: str | Path, what: str) -> CheckpointError:
    """The one-line error for a run without a complete checkpoint, `what` naming the
    caller (e.g. "--resume RUN_DIR"). Directories named iter_XXXXXX without META_FILE
    are not checkpoints (saves rename a finished one into place, so only damage outside
    skurl leaves one): they are named, or the message would say "none yet" to a user
    looking at several."""
    root = checkpoint_dir(run_dir)
    partial = sorted(p.name for p in _iter_dirs(run_dir) if not (p / META_FILE).is_file())
    if not partial:
        return CheckpointError(f"{what}: no checkpoint yet (expected {root}/{PREFIX}XXXXXX)")
    shown = ", ".join(partial[:3]) + (f" and {len(partial) - 3} more" if len(partial) > 3 else "")
    return CheckpointError(f"{what}: no complete checkpoint in {root} ({shown} lack {META_FILE}: incomplete or "
                           f"damaged; expected {STATE_FILE} and {META_FILE} in each)")


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: str | Path, learner: Learner, meta: dict[str, Any] | None = None, keep: int = 3) -> Path:
    """Write the learner's full state as checkpoints/iter_{learner.iteration:06d}."""
    tensors, info = learner_state(learner)
    info.update(meta or {})
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{learner.iteration:06d}"
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    data = save(tensors, metadata={"format": FORMAT})
    (tmp / STATE_FILE).write_bytes(data)
    info[SHA_KEY] = hashlib.sha256(data).hexdigest()
    (tmp / META_FILE).write_text(json.dumps(info, indent=1, sort_keys=True))
    for name in (STATE_FILE, META_FILE):
        _fsync(tmp / name)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync(root)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, meta) of one checkpoint directory; tensors are loaded without pickle."""
    path = Path(path)
    state, meta_file = path / STATE_FILE, path / META_FILE
    if not state.is_file() or not meta_file.is_file():
        raise CheckpointError(f"checkpoint '{path}': expected {STATE_FILE} and {META_FILE}")
    try:
        meta = json.loads(meta_file.read_text())
    except ValueError as exc:
        raise DamagedCheckpointError(f"checkpoint '{path}': {META_FILE} is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else meta
        raise CheckpointError(f"checkpoint '{path}': format {got!r}, expected {FORMAT!r}")
    data = state.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if SHA_KEY in meta and digest != meta[SHA_KEY]:
        raise DamagedCheckpointError(f"checkpoint '{path}': {STATE_FILE} is damaged (sha256 {digest[:12]}..., "
                                     f"expected {str(meta[SHA_KEY])[:12]}... from {META_FILE})")
    try:
        return load(data), meta
    except SafetensorError as exc:
        raise DamagedCheckpointError(f"checkpoint '{path}': {STATE_FILE} is not readable safetensors ({exc})") from None


def load_latest(run_dir: str | Path) -> tuple[Path, dict[str, torch.Tensor], dict[str, Any]] | None:
    """(path, tensors, meta) of the newest intact checkpoint of RUN_DIR; None if there is
    none at all. Damaged ones on the way are renamed to checkpoints/damaged.iter_XXXXXX
    (kept for inspection, out of the way of later saves) with a one-line warning: a resumed
    run redoes their iterations instead of stopping or, worse, loading wrong weights."""
    found = list_checkpoints(run_dir)
    for path in reversed(found):
        try:
            tensors, meta = load_checkpoint(path)
            return path, tensors, meta
        except DamagedCheckpointError as exc:
            aside = path.with_name(DAMAGED_PREFIX + path.name)
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(path, aside)
            print(f"skurl: {exc}; moved to {aside.name}, using the one before", file=sys.stderr)
    if found:
        raise CheckpointError(f"{checkpoint_dir(run_dir)}: all {len(found)} checkpoints are damaged (moved to "
                              f"{DAMAGED_PREFIX}iter_*); expected at least one intact iter_XXXXXX")
    return None


def restore_latest(learner: Learner, run_dir: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """Restore `learner` from the newest intact checkpoint (load_latest); (path, meta)."""
    found = load_latest(run_dir)
    if found is None:
        return None
    path, tensors, meta = found
    return path, _restore(learner, tensors, meta, True)


def restore_learner(learner: Learner, path: str | Path, restore_rng: bool = True) -> dict[str, Any]:
    """Load weights, optimizer, normalizers, counters (and RNG states) into `learner`."""
    tensors, meta = load_checkpoint(path)
    return _restore(learner, tensors, meta, restore_rng)


def check_shapes(saved: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """One line naming the first weight whose shape differs from the model's (a resumed run
    whose policy.hidden, policy.actions.n or observation width changed), not torch's
    multi-line size-mismatch RuntimeError."""
    for name, want in model.state_dict().items():
        got = saved.get(name)
        if got is not None and tuple(got.shape) != tuple(want.shape):
            raise CheckpointError(
                f"checkpoint weight '{name}' has shape {list(got.shape)}, this config builds {list(want.shape)}; "
                "expected the run's own policy.hidden, policy.actions.n and catalog features")


def _restore(learner: Learner, tensors: dict[str, torch.Tensor], meta: dict[str, Any], restore_rng: bool) -> dict[str, Any]:
    check_shapes(_strip(tensors, "model/"), learner.model)
    learner.model.load_state_dict(_strip(tensors, "model/"))
    learner.reward_scaler.load_state_dict(_strip(tensors, "reward_scaler/"))
    learner.optimizer.load_state_dict(_optimizer_state(tensors, meta["optimizer_param_groups"]))
    learner.iteration = int(meta["iteration"])
    learner.version = int(meta["version"])
    if restore_rng:
        set_rng_state(tensors, meta["rng"])
    return meta


def model_state(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Only the model's state_dict (weights + observation normalizer) and the meta."""
    tensors, meta = load_checkpoint(path)
    return _strip(tensors, "model/"), meta


def first_intact_model(paths: list[Path]) -> tuple[Path, dict[str, torch.Tensor], dict[str, Any]]:
    """(path, model state, meta) of the first of `paths` whose checkpoint is intact, for a
    reader (eval, export): each damaged one before it is named on stderr and left where it
    is (only a resuming run moves a run's files aside, load_latest)."""
    for path in paths:
        try:
            state, meta = model_state(path)
        except DamagedCheckpointError as exc:
            print(f"skurl: {exc}; skipped", file=sys.stderr)
            continue
        if path != paths[0]:
            print(f"skurl: using checkpoint '{path}'", file=sys.stderr)
        return path, state, meta
    where = sorted({str(p.parent) for p in paths})
    raise CheckpointError(f"{', '.join(where)}: all {len(paths)} checkpoints are damaged; expected at least one "
                          "intact iter_XXXXXX")


def learner_state(learner: Learner) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    for k, v in learner.model.state_dict().items():
        tensors[f"model/{k}"] = v
    for k, v in learner.reward_scaler.state_dict().items():
        tensors[f"reward_scaler/{k}"] = v
    opt = learner.optimizer.state_dict()
    for pid, state in opt["state"].items():
        for k, v in state.items():
            tensors[f"optim/{pid}/{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    rng_tensors, rng_meta = get_rng_state()
    tensors.update(rng_tensors)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    meta = {
        "format": FORMAT,
        "iteration": int(learner.iteration),
        "version": int(learner.version),
        "optimizer_param_groups": opt["param_groups"],
        "rng": rng_meta,
    }
    return tensors, meta


def get_rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Global torch, numpy and python RNG states: bytes as uint8 tensors, scalars as JSON."""
    np_state = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())  # legacy MT19937
    py_version, py_internal, py_gauss = random.getstate()
    tensors = {
        "rng/torch": torch.get_rng_state(),
        "rng/numpy": _bytes_tensor(np.asarray(np_state[1], np.uint32).tobytes()),
        "rng/python": _bytes_tensor(np.asarray(py_internal, np.uint32).tobytes()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/cuda/{i}"] = s
    meta = {
        "numpy": {"kind": np_state[0], "pos": int(np_state[2]), "has_gauss": int(np_state[3]),
                  "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "gauss_next": py_gauss},
    }
    return tensors, meta


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["rng/torch"])
    npm = meta["numpy"]
    keys = np.frombuffer(tensors["rng/numpy"].numpy().tobytes(), np.uint32)
    np.random.set_state((npm["kind"], keys, npm["pos"], npm["has_gauss"], npm["cached_gaussian"]))
    internal = tuple(int(v) for v in np.frombuffer(tensors["rng/python"].numpy().tobytes(), np.uint32))
    random.setstate((meta["python"]["version"], internal, meta["python"]["gauss_next"]))
    cuda = sorted(k for k in tensors if k.startswith("rng/cuda/"))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda])


def _optimizer_state(tensors: dict[str, torch.Tensor], param_groups: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, v in tensors.items():
        if name.startswith("optim/"):
            _, pid, key = name.split("/", 2)
            state.setdefault(int(pid), {})[key] = v
    groups = [dict(g, betas=tuple(g["betas"])) if "betas" in g else dict(g) for g in param_groups]
    return {"state": state, "param_groups": groups}


def _strip(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _bytes_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
