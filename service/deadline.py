"""One deadline per call: every wait of the call (a slot, each attempt, each backoff) draws on it, so a
call with retries takes at most its timeout, never (retries + 1) × timeout."""

from __future__ import annotations

import time


class Deadline:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._at = time.monotonic() + timeout_s

    def remaining(self) -> float:
        return max(0.0, self._at - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def allows(self, wait_s: float, *, then_s: float = 0.05) -> bool:
        """True when waiting ``wait_s`` still leaves ``then_s`` for another attempt."""
        return wait_s + then_s < self.remaining()
