"""The vectorized inventory simulator (docs/architecture.md, Simulator semantics): `VectorEnv` over a Catalog shard,
its counter-based random numbers (rng), demand samplers (demand), and a slow scalar
reference (reference) that the tests step side by side with it."""

from skurl.sim.env import VectorEnv

__all__ = ["VectorEnv"]
