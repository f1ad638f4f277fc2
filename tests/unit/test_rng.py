"""Counter-based random numbers: pure functions of their coordinates, uniform, independent."""

from __future__ import annotations

import numpy as np
from scipy import stats

from skurl.sim.rng import draw_u64, run_key, sku_key, sku_keys, uniform, uniforms


def test_draws_are_pure_functions_of_their_coordinates() -> None:
    key = np.uint64(sku_key(run_key(7, 3), 12345))
    assert uniform(key, 10, 0, 2) == uniform(key, 10, 0, 2)
    assert sku_key(run_key(7, 3), 12345) == key
    assert np.array_equal(uniforms(key, 10, 0, 5), uniforms(key, 10, 0, 5))


def test_every_coordinate_changes_the_draw() -> None:
    base = (7, 3, 12345, 10, 0, 2)

    def draw(seed: int, episode: int, sku: int, day: int, stream: int, k: int) -> float:
        return uniform(np.uint64(sku_key(run_key(seed, episode), sku)), day, stream, k)

    ref = draw(*base)
    for pos in range(len(base)):
        changed = list(base)
        changed[pos] += 1
        assert draw(*changed) != ref, f"coordinate {pos} does not change the draw"


def test_vectorized_keys_match_scalar_keys() -> None:
    key = run_key(1, 0)
    ids = np.array([0, 1, 2**40, 987654321], np.int64)
    assert [int(k) for k in sku_keys(key, ids)] == [int(sku_key(key, int(i))) for i in ids]


def test_uniforms_lie_strictly_inside_the_unit_interval_and_are_uniform() -> None:
    key = np.uint64(sku_key(run_key(0, 0), 1))
    u = uniforms(key, 3, 1, 200_000)
    assert u.min() > 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)


def test_neighbouring_counters_are_uncorrelated() -> None:
    run = run_key(5, 0)
    skus = np.arange(50_000)
    keys = sku_keys(run, skus)
    days = np.array([[uniform(k, d, 0, 0) for d in (0, 1)] for k in keys[:20_000]])
    streams = np.array([uniform(k, 0, 1, 0) for k in keys[:20_000]])
    bound = 5 / np.sqrt(20_000)
    assert abs(np.corrcoef(days[:, 0], days[:, 1])[0, 1]) < bound  # adjacent days
    assert abs(np.corrcoef(days[:, 0], streams)[0, 1]) < bound  # adjacent streams
    first = np.array([uniform(k, 0, 0, 0) for k in keys[:20_000]])
    nxt = np.array([uniform(k, 0, 0, 0) for k in keys[1:20_001]])
    assert abs(np.corrcoef(first, nxt)[0, 1]) < bound  # adjacent SKU ids


def test_one_bit_of_input_flips_about_half_the_output_bits() -> None:
    key = np.uint64(sku_key(run_key(0, 0), 0))
    flips = [bin(int(draw_u64(key, d, 0, 0)) ^ int(draw_u64(key, d + 1, 0, 0))).count("1")
             for d in range(0, 4000, 2)]
    assert 31.0 < float(np.mean(flips)) < 33.0


def test_int64_typed_keys_give_the_same_bits() -> None:
    # Keys below 2^63 arrive from Python as int64; the result must not depend on that.
    small = 2186992254525972283
    assert uniform(small, 3, 1, 0) == uniform(np.uint64(small), 3, 1, 0)
    assert uniforms(small, 3, 1, 1000).max() > 0.9


def test_large_seeds_and_episodes_are_accepted() -> None:
    assert run_key(2**70 + 5, 2**64 - 1) == run_key(2**70 + 5, 2**64 - 1)
    assert run_key(1, 0) != run_key(1, 1) != run_key(2, 0)
