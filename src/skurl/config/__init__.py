"""Every setting of skurl as typed dataclasses, one section per reader (`skurl config keys`).

sections.py: the Config root and the sim, policy, ppo, train, eval sections; actions.py:
policy.actions; catalog.py; services.py: rpc, deploy, sync, store, ray; dcl.py; tracking.py;
loader.py: YAML, --set overrides and validation; flags.py: the --config/--set flags of the commands.
"""

from __future__ import annotations

from skurl.config.catalog import (
    UNIFORM_COLUMNS,
    CatalogConfig,
    DemandConfig,
    DemandDist,
    SerialConfig,
    SyntheticConfig,
    check_uniform_bounds,
)
from skurl.config.collect import MOVED, CollectConfig, refuse_moved
from skurl.config.dcl import (
    DclConfig,
    auto_horizon,
)
from skurl.config.loader import (
    MAX_SEED,
    apply_overrides,
    build,
    check,
    check_seed,
    describe,
    opt,
    read_yaml,
    section,
    to_dict,
)
from skurl.config.sections import (
    DEVICE_PATTERN,
    POLICY_NAMES,
    ActionsConfig,
    Config,
    EvalConfig,
    PolicyConfig,
    PPOConfig,
    SimConfig,
    TrainConfig,
    config_to_dict,
    load_config,
)
from skurl.config.services import (
    DeployConfig,
    RayConfig,
    RpcConfig,
    StoreConfig,
    SyncBackend,
    SyncConfig,
    TlsConfig,
)
from skurl.config.tracking import (
    TrackingConfig,
)
from skurl.config.transfers import TransfersConfig

__all__ = [
    "DEVICE_PATTERN",
    "MAX_SEED",
    "MOVED",
    "POLICY_NAMES",
    "UNIFORM_COLUMNS",
    "ActionsConfig",
    "CatalogConfig",
    "CollectConfig",
    "Config",
    "DclConfig",
    "DemandConfig",
    "DemandDist",
    "DeployConfig",
    "EvalConfig",
    "PPOConfig",
    "PolicyConfig",
    "RayConfig",
    "RpcConfig",
    "SerialConfig",
    "SimConfig",
    "StoreConfig",
    "SyncBackend",
    "SyncConfig",
    "SyntheticConfig",
    "TlsConfig",
    "TrackingConfig",
    "TrainConfig",
    "TransfersConfig",
    "apply_overrides",
    "auto_horizon",
    "build",
    "check",
    "check_seed",
    "check_uniform_bounds",
    "config_to_dict",
    "describe",
    "load_config",
    "opt",
    "read_yaml",
    "refuse_moved",
    "section",
    "to_dict",
]
