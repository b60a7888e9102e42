"""How long torch's CPU threads wait for work by spinning, set before torch loads (`import bertkit` does it).

torch computes on CPUs with OpenMP threads (GNU libgomp in its Linux wheels). Between two parallel pieces of
work each thread spins, by default up to 300,000 rounds, before it sleeps. Alone on the machine that saves a
wake-up; next to another busy process it takes the cores that process needs: two pretrainings at once on 2
cores ran at 0.22-0.33x their speed alone each (half the work of one alone, together). Spinning 1,000 rounds
keeps the speed alone (within the noise) and gives each of two at once 0.56x (bench/bench_contention.py,
bench/results/contention.md). Waiting never changes a result: only thread counts would.

A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins; so does a libgomp that torch loaded before bertkit (then
nothing here applies: `import bertkit` before `import torch`, or set GOMP_SPINCOUNT=1000 yourself). Processes
bertkit starts (prepare's workers, torchrun's ranks) inherit the setting through the environment.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

SPIN_ROUNDS = 1000  # libgomp's GOMP_SPINCOUNT: rounds a waiting OpenMP thread spins before it sleeps


def wait_quietly(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set GOMP_SPINCOUNT to SPIN_ROUNDS unless the user chose how OpenMP threads wait. Returns whether it did."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return False
    environ["GOMP_SPINCOUNT"] = str(SPIN_ROUNDS)
    return True
