"""Seeded randomness without state: draws that are pure functions of (seed, stream, counters).

    uniform(seed, stream, *counters)     floats in [0, 1), one per element of the broadcast counters
    integers(seed, stream, n, *counters) integers in [0, n)
    Permutation(n, seed)                 a shuffle of range(n) that is never held as a list: p(i) for any i

Why not a generator walked in order: a draw that depends only on what it is for (the masking of row r,
token t at step s; whether document d is held out; where position i of epoch e goes) is the same on every
process, for every worker count, and after a resume, without any state to save or replay, and each
process computes only the draws for its own rows. The hash is splitmix64's finaliser (Steele et al. 2014),
chained over the counters; the permutation is a 6-round Feistel network on the smallest even number of
bits that covers n, walked in cycles until it lands inside range(n) (Black & Rogaway 2002). Both are
vectorised in numpy: a batch of draws costs a few array operations, whatever the size of the corpus.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import numpy.typing as npt

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
ROUNDS = 6


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that spreads every input bit over every output bit."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def hash64(seed: int, stream: int, *counters: npt.ArrayLike) -> np.ndarray:
    """uint64 hashes of (seed, stream, counters...), broadcast over the counters' shapes."""
    with np.errstate(over="ignore"):
        h = _mix(np.asarray([(int(seed) * 0x9E3779B1 + int(stream)) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
        for c in counters:
            h = _mix(h ^ (np.asarray(c).astype(np.uint64) + _GOLDEN))
    return h


@overload
def uniform(seed: int, stream: int, *counters: int | np.integer) -> float: ...
@overload
def uniform(seed: int, stream: int, *counters: npt.ArrayLike) -> float | np.ndarray: ...
def uniform(seed: int, stream: int, *counters: npt.ArrayLike) -> float | np.ndarray:
    """Floats in [0, 1) (53 random bits each), one per element of the broadcast counters; a float for ints."""
    h = hash64(seed, stream, *counters)
    out = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return float(out[0]) if all(np.ndim(c) == 0 for c in counters) else out


def integers(seed: int, stream: int, n: int, *counters: npt.ArrayLike) -> np.ndarray:
    """Integers in [0, n) (int64), one per element of the broadcast counters (bias below 2**-40 for n < 2**24)."""
    return (hash64(seed, stream, *counters) % np.uint64(n)).astype(np.int64)


class Permutation:
    """A seeded bijection of range(n): p(i) for an array of positions, with O(1) memory whatever n is."""

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        self.n = int(n)
        self.half = max(1, ((self.n - 1).bit_length() + 1) // 2)  # 2 * half bits cover n - 1
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = [int(k) for k in hash64(seed, 0, np.arange(ROUNDS))]

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(self.half), x & self.mask
        with np.errstate(over="ignore"):
            for key in self.keys:
                left, right = right, left ^ (_mix(right ^ np.uint64(key)) & self.mask)
        return (left << np.uint64(self.half)) | right

    def __call__(self, positions: npt.ArrayLike) -> np.ndarray:
        x = np.asarray(positions, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= self.n):
            raise IndexError(f"positions must be in [0, {self.n})")
        out = self._feistel(x.astype(np.uint64))
        outside = out >= np.uint64(self.n)
        while outside.any():  # cycle walking: at most a few rounds, as 4**half < 4 n
            out[outside] = self._feistel(out[outside])
            outside = out >= np.uint64(self.n)
        return out.astype(np.int64)
