"""Config loading: YAML + --set overrides, type coercion, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from skurl.cli import main
from skurl.config import MOVED, Config, config_to_dict, load_config
from skurl.errors import ConfigError


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def _error(path: Path | None = None, overrides: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_defaults_without_a_file() -> None:
    cfg = load_config()
    assert cfg == Config()
    assert cfg.catalog.kind == "synthetic" and cfg.sim.days == 100


def test_yaml_then_set_overrides(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "sim:\n  days: 30\n  backorders: true\ncatalog:\n  demand:\n    mean: 2.5\n")
    cfg = load_config(path, ["sim.days=40", "catalog.synthetic.promo_share=0.5", "policy.hidden=[64,32]"])
    assert cfg.sim.days == 40  # --set wins over the file
    assert cfg.sim.backorders is True
    assert cfg.catalog.demand.mean == 2.5
    assert cfg.catalog.synthetic.promo_share == 0.5
    assert list(cfg.policy.hidden) == [64, 32]
    assert cfg.ppo == Config().ppo  # untouched sections keep their defaults


def test_set_values_are_coerced_like_yaml() -> None:
    cfg = load_config(None, ["sim.days=1_000", "ppo.lr=1e-3", "sim.substitution=off", "catalog.path=null",
                             "catalog.skus=5e3", "policy.hidden=128,128"])
    assert cfg.sim.days == 1000 and cfg.ppo.lr == 1e-3 and cfg.sim.substitution is False
    assert cfg.catalog.path is None and cfg.catalog.skus == 5000
    assert list(cfg.policy.hidden) == [128, 128]


def test_round_trip_through_yaml(tmp_path: Path) -> None:
    cfg = load_config(None, ["sim.days=7", "catalog.kind=uniform", "policy.hidden=[8]"])
    again = load_config(_yaml(tmp_path, yaml.safe_dump(config_to_dict(cfg))))
    assert config_to_dict(again) == config_to_dict(cfg)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["sim.dayz=5"], "unknown config key 'sim.dayz' (expected one of: backorders, days"),
        (["simulator.days=5"], "unknown config key 'simulator'"),
        (["catalog.synthetic.colour=red"], "unknown config key 'catalog.synthetic.colour'"),
        (["sim.days=abc"], "config key 'sim.days': got 'abc', expected int"),
        (["sim.days=2.5"], "config key 'sim.days': got '2.5', expected int"),
        (["ppo.lr=fast"], "config key 'ppo.lr': got 'fast', expected float"),
        (["sim.backorders=maybe"], "config key 'sim.backorders': got 'maybe', expected bool"),
        (["sim.issuing=random"], "config key 'sim.issuing': got 'random', expected 'fifo' | 'lifo'"),
        (["catalog.demand.dist=normal"], "config key 'catalog.demand.dist': got 'normal', expected 'poisson'"),
        (["policy.hidden=[64,x]"], "config key 'policy.hidden[1]'"),
        (["sim.days"], "--set 'sim.days': expected key=value"),
        (["sim=5"], "--set 'sim': is a section"),
        (["sim.days.x=5"], "'sim.days' is not a section"),
    ],
)
def test_bad_overrides_name_the_key(overrides: list[str], expected: str) -> None:
    assert expected in _error(None, overrides)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["sim.days=0"], "config key 'sim.days': got 0, expected an integer >= 1"),
        (["catalog.skus=0"], "config key 'catalog.skus'"),
        (["catalog.lead_time=0"], "config key 'catalog.lead_time'"),
        (["catalog.holding_cost=-1"], "config key 'catalog.holding_cost': got -1.0"),
        (["catalog.demand.mean=nan"], "config key 'catalog.demand.mean': got nan"),
        (["catalog.synthetic.promo_share=1.5"], "config key 'catalog.synthetic.promo_share': got 1.5, expected a share"),
        (["catalog.synthetic.perishable_share=nan"], "config key 'catalog.synthetic.perishable_share'"),
        (["catalog.synthetic.categories=0"], "config key 'catalog.synthetic.categories'"),
        (["catalog.synthetic.max_lead_time=61"], "config key 'catalog.synthetic.max_lead_time'"),
        (["catalog.synthetic.median_demand=0"], "config key 'catalog.synthetic.median_demand'"),
        (["catalog.synthetic.demand_tail=-1"], "config key 'catalog.synthetic.demand_tail'"),
        (["catalog.synthetic.forecast_noise=9"], "config key 'catalog.synthetic.forecast_noise'"),
        (["catalog.kind=file"], "config key 'catalog.path'"),
        (["ppo.gamma=1.5"], "config key 'ppo.gamma'"),
        (["train.seed=-1"], "config key 'train.seed': got -1, expected an integer in [0, 2^62]"),
        (["train.seed=1e30"], "config key 'train.seed'"),
        (["eval.seed=-1"], "config key 'eval.seed'"),
        (["catalog.seed=-1"], "config key 'catalog.seed'"),
        (["train.device=tpu"], "config key 'train.device': got 'tpu', expected auto, cpu, cuda or cuda:N"),
        (["train.device=cuda:abc"], "config key 'train.device'"),
    ],
)
def test_validation_names_the_key(overrides: list[str], expected: str) -> None:
    assert expected in _error(None, overrides)


def test_yaml_file_errors(tmp_path: Path) -> None:
    assert "not found" in _error(tmp_path / "missing.yaml")
    assert "line 2: not valid YAML" in _error(_yaml(tmp_path, "sim:\n\tdays: 1\n"))
    assert "expected a mapping at the top level" in _error(_yaml(tmp_path, "- 1\n- 2\n"))
    assert "unknown config key 'sim.weeks'" in _error(_yaml(tmp_path, "sim:\n  weeks: 3\n"))
    assert "config key 'sim': expected a mapping" in _error(_yaml(tmp_path, "sim: 3\n"))
    assert "line 3: key 'days' appears twice" in _error(_yaml(tmp_path, "sim:\n  days: 5\n  days: 7\n"))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x01\xff")
    assert "byte 2 is not UTF-8; expected a YAML text file" in _error(binary)


def test_yaml_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    text = "sim:\n  <<: {days: 5, review_days: 2}\n  days: 9\n"
    cfg = load_config(_yaml(tmp_path, text))
    assert cfg.sim.days == 9 and cfg.sim.review_days == 2
    assert "config key 'sim.days': got 'ten'" in _error(_yaml(tmp_path, "sim:\n  days: ten\n"))
    assert "config key 'sim.backorders': got 1" in _error(_yaml(tmp_path, "sim:\n  backorders: 1\n"))
    assert load_config(_yaml(tmp_path, "")) == Config()  # an empty file is the defaults


def test_config_show_prints_the_resolved_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _yaml(tmp_path, "sim:\n  days: 12\n")
    assert main(["config", "show", "--config", str(path), "--set", "ppo.epochs=3"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["sim"]["days"] == 12 and shown["ppo"]["epochs"] == 3
    assert shown == config_to_dict(load_config(path, ["ppo.epochs=3"]))


def test_config_keys_lists_every_key_with_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "keys"]) == 0
    out = capsys.readouterr().out
    assert "catalog.synthetic.median_demand (float, default 0.5): median" in out
    assert "sim.issuing ('fifo' | 'lifo', default 'fifo')" in out


def test_config_show_bad_set_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--set", "sim.days=-3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sim.days" in err


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_key_moved_to_the_collect_section_is_one_line_naming_it(old: str, tmp_path: Path) -> None:
    new = MOVED[old]
    with pytest.raises(ConfigError, match=f"'{old}' moved to '{new}'"):
        load_config(None, [f"{old}=1"])
    section, key = old.split(".")
    path = tmp_path / "run.yaml"
    path.write_text(f"{section}:\n  {key}: 1\n")
    with pytest.raises(ConfigError, match=f"'{old}' moved to '{new}'"):
        load_config(path)


def test_the_collect_section_holds_the_collectors_settings() -> None:
    cfg = load_config(None, ["collect.staleness=2", "collect.max_lag=3", "collect.skus=10", "collect.values=true"])
    assert (cfg.collect.staleness, cfg.collect.max_lag, cfg.collect.skus, cfg.collect.values) == (2, 3, 10, True)
    with pytest.raises(ConfigError, match=r"collect\.max_lag"):
        load_config(None, ["collect.staleness=2", "collect.max_lag=1"])
    with pytest.raises(ConfigError, match=r"collect\.staleness"):
        load_config(None, ["collect.staleness=1", "train.algo=dcl"])
