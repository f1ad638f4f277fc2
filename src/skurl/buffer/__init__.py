"""Rollout arrays [T, N], GAE and minibatching."""

from skurl.buffer.rollout import Columns, Rollout

__all__ = ["Columns", "Rollout"]
