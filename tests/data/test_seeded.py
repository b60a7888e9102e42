"""bertkit.data.seeded: seeded permutations and uniform and integer draws, pure functions of seed and counters."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from data_helpers import SIGMAS, within

from bertkit.data.seeded import Permutation, hash64, integers, uniform


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097])
def test_permutation_is_a_bijection(n):
    perms = {}
    for seed in (0, 1, 12345):
        p = Permutation(n, seed)
        everything = p(np.arange(n))
        assert everything.dtype == np.int64 and np.array_equal(np.sort(everything), np.arange(n))
        # evaluated in chunks, or at scattered positions, it is the same function
        cuts = sorted(random.Random(seed).sample(range(1, n), min(5, n - 1))) if n > 1 else []
        chunks = [p(np.arange(a, b)) for a, b in zip([0, *cuts], [*cuts, n])]
        assert np.array_equal(np.concatenate(chunks), everything)
        positions = np.random.default_rng(seed).integers(0, n, 50)
        assert np.array_equal(p(positions), everything[positions])
        assert np.array_equal(Permutation(n, seed)(np.arange(n)), everything)  # a function of (n, seed) only
        perms[seed] = everything
    if n >= 5:
        assert len({tuple(v) for v in perms.values()}) == 3  # other seeds, other shuffles
    if n >= 1000:
        everything = perms[0]
        assert (everything == np.arange(n)).sum() <= 10  # about one fixed point, as a random shuffle
        assert abs(np.corrcoef(everything, np.arange(n))[0, 1]) < 5 / math.sqrt(n)


def test_permutation_checks():
    with pytest.raises(ValueError):
        Permutation(0, 0)
    p = Permutation(10, 0)
    for bad in ([10], [-1]):
        with pytest.raises(IndexError):
            p(np.array(bad))
    assert len(p(np.zeros(0, dtype=np.int64))) == 0


def test_uniform_and_integers():
    n = 200_000
    u = uniform(3, 1, np.arange(n))
    assert u.shape == (n,) and u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) <= SIGMAS * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) <= SIGMAS * math.sqrt(1 / 180 / n)  # Var[(U - 1/2)^2] = 1/80 - 1/144
    counts = np.bincount((u * 20).astype(int), minlength=20)
    assert all(within(int(c), n, 1 / 20) for c in counts)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / math.sqrt(n)  # neighbours independent
    # a pure function of (seed, stream, counters), broadcast over them
    assert isinstance(uniform(3, 1, 17), float) and uniform(3, 1, 17) == u[17]
    grid = uniform(3, 1, np.arange(4)[:, None], np.arange(6)[None, :])
    assert grid.shape == (4, 6) and grid[2, 5] == uniform(3, 1, 2, 5)
    assert uniform(4, 1, 17) != u[17] and uniform(3, 2, 17) != u[17] and uniform(3, 1, 2, 5) != uniform(3, 1, 5, 2)
    assert np.array_equal(hash64(3, 1, np.arange(5)), hash64(3, 1, np.arange(5)))
    k = integers(9, 2, 7, np.arange(n))
    assert k.dtype == np.int64 and k.min() == 0 and k.max() == 6
    assert all(within(int(c), n, 1 / 7) for c in np.bincount(k, minlength=7))
    big = integers(9, 2, 3000, np.arange(n))
    assert big.min() >= 0 and big.max() < 3000 and len(np.unique(big)) == 3000
