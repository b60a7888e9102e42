"""How torch's OpenMP threads wait (bertkit/threads.py): set by `import bertkit` before torch loads, unless the
user chose. The speed it buys is measured in bench/bench_contention.py, not here."""

import os
import subprocess
import sys

from bertkit.threads import SPIN_ROUNDS, wait_quietly

SHOW = "import os, bertkit, torch; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"


def test_wait_quietly_sets_the_spin_count_unless_the_user_chose():
    env = {}
    assert wait_quietly(env) and env == {"GOMP_SPINCOUNT": str(SPIN_ROUNDS)}
    for chosen in ({"GOMP_SPINCOUNT": "300000"}, {"OMP_WAIT_POLICY": "ACTIVE"}):
        env = dict(chosen)
        assert not wait_quietly(env) and env == chosen


def test_importing_bertkit_sets_it_for_torch_and_for_the_processes_it_starts():
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    shown = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, env=clean, check=True)
    assert shown.stdout.split() == [str(SPIN_ROUNDS), "None"]
    passive = subprocess.run(
        [sys.executable, "-c", SHOW],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, "OMP_WAIT_POLICY": "PASSIVE"},
    )
    assert passive.stdout.split() == ["None", "PASSIVE"]
