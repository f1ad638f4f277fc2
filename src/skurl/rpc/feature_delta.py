"""Lean EnvService replies: the client's side of the observation delta (the codec itself
is buffer/obs_delta.py). The client holds the previous matrix, can place the server's
columns into a wider schema (the catalog's, sim/layout.py), and refuses a delta that does
not follow its own day: a lost reply can never silently corrupt the features.
"""

from __future__ import annotations

import numpy as np

from skurl.buffer.obs_delta import (
    BASE_ZEROS,
    FeatureDeltaEncoder,
    _decode,
    _frozen,
    decode_days,
    encode_days,
    mask_bytes,
)
from skurl.rpc.errors import WireError


class FeatureDeltaDecoder:
    """Client side: the features held, patched by each delta; `cols[j]` is the column of
    the held matrix that the server's column j fills (a wider schema's layout)."""

    def __init__(self, rows: int, server_dim: int, out_dim: int, cols: np.ndarray | None = None) -> None:
        self.server_dim = server_dim
        self.cols = np.arange(server_dim, dtype=np.int64) if cols is None else np.asarray(cols, np.int64)
        if self.cols.shape != (server_dim,) or (server_dim and self.cols.max() >= out_dim):
            raise ValueError(f"column map of shape {self.cols.shape} does not fit {server_dim} -> {out_dim}")
        self._held = np.zeros((rows, out_dim), np.float32)  # the base of the next delta
        self._view = self._held.view(np.uint32)
        # What callers get: read-only, since the held features are the next delta's base,
        # which a caller writing into them would corrupt; no copy (56 MB a day at 200k SKUs),
        # since like a VectorEnv's features they are valid until the next step.
        self.features = self._held.view()
        self.features.flags.writeable = False
        self.day = BASE_ZEROS

    def apply(self, arrays: dict[str, np.ndarray], day: int) -> np.ndarray:
        """Patch the held features with a reply's delta; returns them as a read-only view
        that the next `apply` overwrites (copy what you keep)."""
        mask, values, base = arrays["features_mask"], arrays["features_values"], arrays["features_base"]
        rows = self.features.shape[0]
        if mask.shape != (mask_bytes(rows, self.server_dim),):
            raise WireError(f"reply tensor 'features_mask': shape {list(mask.shape)}, expected "
                            f"[{mask_bytes(rows, self.server_dim)}] for {rows} x {self.server_dim} features")
        if base.shape != (1,):
            raise WireError(f"reply tensor 'features_base': shape {list(base.shape)}, expected [1]")
        if int(base[0]) == BASE_ZEROS:
            self._held[:] = 0
        elif int(base[0]) != self.day:
            raise WireError(f"lean reply: features delta against day {int(base[0])}, but this "
                            f"client holds day {self.day} (a reply was lost); reset the env")
        used = _decode(_frozen(mask, np.uint8), _frozen(values, np.uint32), self.cols, self._view)
        if used != values.shape[0]:
            self.day = BASE_ZEROS - 1  # held features are now unusable: only a reset helps
            raise WireError(f"lean reply: features mask and {values.shape[0]} values disagree")
        self.day = int(day)
        return self.features


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels for the arrays they get on both
    sides (received bytes are read-only views), before any call has a deadline."""
    features = np.arange(12, dtype=np.float32).reshape(4, 3)
    FeatureDeltaDecoder(4, 3, 3).apply(FeatureDeltaEncoder(4, 3).encode(features, 0), 0)
    packed = encode_days(features[None])
    decode_days(packed, 4, 3)
    decode_days(packed, 4, 3, np.array([1, 3]))
