"""The worker's own view of its lease, on a clock the test steps: every boundary is exact (the steps are
binary fractions, so no rounding blurs them)."""

from __future__ import annotations

import pytest

from indexer.lease import Lease
from indexer.queue import LeaseLost
from tests.support.lease_clock import ManualClock


def test_the_lease_holds_until_its_margin_counted_from_the_claim_sent() -> None:
    clock = ManualClock()
    lease = Lease("j", 1, 0.5, sent_at=clock(), margin_s=0.125, clock=clock)
    clock.advance(0.375)  # exactly the margin left: still held
    assert lease.remaining_s == 0.125
    lease.check()
    clock.advance(0.0625)  # under the margin
    with pytest.raises(LeaseLost, match="no heartbeat acknowledged within the lease"):
        lease.check()


def test_the_lease_is_counted_from_when_the_claim_was_sent_not_from_when_it_was_answered() -> None:
    clock = ManualClock()
    sent = clock()
    clock.advance(0.25)  # the claim's answer took 0.25 s to come back
    lease = Lease("j", 1, 0.5, sent_at=sent, margin_s=0.125, clock=clock)
    assert lease.remaining_s == 0.25
    clock.advance(0.1875)
    with pytest.raises(LeaseLost):
        lease.check()


def test_an_acknowledged_heartbeat_extends_it_from_when_it_was_sent() -> None:
    clock = ManualClock()
    lease = Lease("j", 1, 0.5, sent_at=clock(), margin_s=0.125, clock=clock)
    clock.advance(0.25)
    beat_sent = clock()
    clock.advance(0.0625)  # the heartbeat's acknowledgement took 0.0625 s
    lease.renewed(beat_sent)
    assert lease.remaining_s == 0.4375  # sent + lease - now, not now + lease
    clock.advance(0.3125)  # 0.625 s after the claim: past the first lease, inside the renewed one
    lease.check()
    lease.renewed(beat_sent - 1.0)  # an older acknowledgement arriving late never shortens it
    assert lease.remaining_s == 0.125
    clock.advance(0.0625)
    with pytest.raises(LeaseLost):
        lease.check()


def test_a_lost_lease_stays_lost() -> None:
    clock = ManualClock()
    lease = Lease("j", 7, 60, sent_at=clock(), margin_s=1, clock=clock)
    lease.lose("heartbeat refused: taken over")
    lease.renewed(clock())
    with pytest.raises(LeaseLost, match="job j, lease 7: heartbeat refused: taken over"):
        lease.check()
    expired = Lease("j", 1, 0.25, sent_at=clock(), margin_s=0.0625, clock=clock)
    clock.advance(1)
    with pytest.raises(LeaseLost):
        expired.check()
    expired.renewed(clock())  # a late acknowledgement does not bring it back once seen lost
    with pytest.raises(LeaseLost):
        expired.check()
