"""Gymnasium adapters over the skurl simulator (the `gym` extra: pip install 'skurl[gym]').

    from skurl.gym import SkuEnv, SkuVectorEnv
    env = SkuEnv(overrides=["catalog.kind=uniform", "sim.days=50"], sku=0, seed=0)
    envs = SkuVectorEnv("configs/uniform.yaml", ["catalog.skus=256"], seed=0)

or through Gymnasium's registry: `gymnasium.make("skurl/Sku-v0", overrides=[...])`,
`gymnasium.make_vec("skurl/Sku-v0", num_envs=256, overrides=[...])` (one simulator for all
sub-envs). Observations are the simulator's features (sim/layout.py schema), actions the
indices of the action grid (policy.actions), rewards the simulator's reward.
"""

from __future__ import annotations

try:
    import gymnasium
except ModuleNotFoundError as e:  # an optional extra: say which one
    raise ModuleNotFoundError("skurl.gym needs gymnasium: pip install 'skurl[gym]'", name=e.name) from None

from skurl.gym.single import SkuEnv
from skurl.gym.spaces import action_space, observation_space
from skurl.gym.vector import SkuVectorEnv

ENV_ID = "skurl/Sku-v0"

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="skurl.gym.single:SkuEnv",
                       vector_entry_point="skurl.gym.vector:SkuVectorEnv")

__all__ = ["ENV_ID", "SkuEnv", "SkuVectorEnv", "action_space", "observation_space"]
