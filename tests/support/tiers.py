"""The suite's two tiers and the bounds that keep the gate's time bounded by structure.

- **The gate** (the default: ``bash tests/run.sh``, what CI runs) holds claims that do not depend on the machine's
  speed: no bound on durations, latencies or throughput, no spread across replicas, no order of concurrent work.
- **The soak tier** (``bash tests/run.sh --soak``: the tests marked ``soak``) holds the claims about speed and load
  (lanes under bulk work, spreads, stall bounds, overload, the full SciFact run, the benchmark smoke runs); each has
  a deterministic twin in the gate that proves the behaviour happens, while the soak run says how well.

``patient(s)`` scales a liveness bound (how long to wait for a process to come up, a job to finish) by
``RAGSERVE_TEST_PATIENCE`` (default 1): such a bound only turns a hang into a failure, it never measures speed.
"""

from __future__ import annotations

import os

SOAK_OPTION = "--soak"
PATIENCE = float(os.environ.get("RAGSERVE_TEST_PATIENCE", "1"))


def patient(seconds: float) -> float:
    """A liveness bound, scaled for slower machines."""
    return seconds * PATIENCE
