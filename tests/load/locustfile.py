"""Locust load on ``POST /v1/search``, driven by tests/load/run.py (which starts ``ragserve serve``, fills a
collection and runs this file with ``locust --headless`` in a process of its own: Locust patches the standard
library with gevent, so it never shares a process with the test or the server).

Two ways to send, chosen by ``LOAD_RATE``:

- ``LOAD_RATE`` > 0, **open loop** (constant arrival rate): every user sends ``LOAD_RATE / users`` requests a
  second on a fixed schedule (the users' schedules interleaved), each request in a greenlet of its own, so a
  slow answer never delays the next request. This is how traffic behaves when many clients share a service,
  and it is what overload means: arrivals that do not slow down when the server does. Latency is measured
  from the *scheduled* send time, so a load generator that falls behind shows up as latency, not as a lower
  rate (no coordinated omission); the lag between schedule and send is recorded too.
- ``LOAD_RATE`` = 0, **closed loop**: each user sends its next request when the last one has answered (the
  most the server serves at this concurrency; used to calibrate).

Every request is recorded (scheduled offset, latency, status, ``Retry-After``, lag) and the records are
written as JSON to ``LOAD_OUT`` when Locust quits; tests/load/run.py computes the figures from them.

Environment: ``LOAD_KEY`` (bearer key), ``LOAD_COLLECTION``, ``LOAD_QUERIES`` (a JSON file: a list of query
strings), ``LOAD_RATE`` (requests/s over all users), ``LOAD_DURATION_S``, ``LOAD_USERS``, ``LOAD_OUT``,
``LOAD_TOP_K`` (10).
"""

from __future__ import annotations

import itertools
import json
import os
import time

import gevent
from gevent.pool import Group
from locust import FastHttpUser, events, task
from locust.exception import StopUser

KEY = os.environ.get("LOAD_KEY", "")
COLLECTION = os.environ.get("LOAD_COLLECTION", "load")
RATE = float(os.environ.get("LOAD_RATE", "0"))
DURATION_S = float(os.environ.get("LOAD_DURATION_S", "60"))
USERS = int(os.environ.get("LOAD_USERS", "64"))
TOP_K = int(os.environ.get("LOAD_TOP_K", "10"))
OUT = os.environ.get("LOAD_OUT")
START_DELAY_S = 1.0
"""Every user's schedule starts this long after the test starts: all users are spawned by then (-r = -u)."""
DRAIN_S = 30.0
"""After the last scheduled send, how long a user waits for its requests still in flight."""

with open(os.environ["LOAD_QUERIES"]) as f:
    QUERIES: list[str] = json.load(f)

RECORDS: list[tuple[float, float, int, str | None, float, dict[str, float] | None]] = []
"""(scheduled send, seconds after the start; latency from the schedule, s; status, 0 for a connection error
or a client timeout; the Retry-After header; lag of the actual send behind the schedule, s; the server's own
``timings_ms`` of a 200: embed (the wait for a query slot included), search, total)"""
_numbers = itertools.count()
_finished = itertools.count(1)
_start: float | None = None


@events.test_start.add_listener
def _on_start(environment, **_kw) -> None:  # noqa: ANN001 - Locust's signature
    global _start
    _start = time.monotonic() + START_DELAY_S


@events.quitting.add_listener
def _on_quit(environment, **_kw) -> None:  # noqa: ANN001
    if OUT:
        with open(OUT, "w") as f:
            json.dump({"rate": RATE, "users": USERS, "duration_s": DURATION_S, "records": RECORDS}, f)


class SearchUser(FastHttpUser):
    concurrency = 512  # connections this user may hold at once: the open loop never waits for one
    network_timeout = 60.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        self.number = next(_numbers)
        self.sent = 0

    def _search(self, scheduled: float) -> None:
        query = QUERIES[(self.number * 7919 + self.sent * 104729) % len(QUERIES)]
        self.sent += 1
        lag = time.monotonic() - scheduled
        with self.client.post("/v1/search", json={"collection": COLLECTION, "query": query, "top_k": TOP_K},
                              headers={"Authorization": f"Bearer {KEY}"}, name="/v1/search",
                              catch_response=True) as response:
            latency = time.monotonic() - scheduled
            status = response.status_code or 0
            headers = response.headers or {}
            timings = None
            if status == 200:
                try:
                    timings = response.json()["timings_ms"]
                except (ValueError, KeyError, TypeError):
                    response.failure("a 200 without timings_ms")
                else:
                    response.success()
            else:
                response.failure(f"HTTP {status}")
        assert _start is not None
        RECORDS.append((scheduled - _start, latency, status, headers.get("Retry-After"), lag, timings))

    @task
    def drive(self) -> None:
        assert _start is not None
        gevent.sleep(max(0.0, _start - time.monotonic()))
        end = _start + DURATION_S
        if RATE > 0:
            interval = USERS / RATE
            first = _start + interval * self.number / USERS  # interleave the users' schedules
            in_flight = Group()
            for k in itertools.count():
                scheduled = first + k * interval
                if scheduled >= end:
                    break
                gevent.sleep(max(0.0, scheduled - time.monotonic()))
                in_flight.spawn(self._search, scheduled)
            in_flight.join(timeout=DRAIN_S)
        else:
            while (now := time.monotonic()) < end:
                self._search(now)
        if next(_finished) == USERS:  # the last user to finish ends the run
            gevent.spawn_later(0.1, self.environment.runner.quit)
        raise StopUser
