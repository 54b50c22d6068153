from __future__ import annotations

import time

import pytest

from indexer.lease import Lease
from indexer.queue import LeaseLost


def test_the_lease_holds_until_its_margin_counted_from_the_claim_sent() -> None:
    sent = time.monotonic()
    lease = Lease("j", 1, 0.4, sent_at=sent, margin_s=0.1)
    lease.check()
    time.sleep(max(0.0, sent + 0.31 - time.monotonic()))  # 0.31 s in: under 0.1 s of the lease left
    with pytest.raises(LeaseLost, match="no heartbeat acknowledged within the lease"):
        lease.check()


def test_an_acknowledged_heartbeat_extends_it_from_when_it_was_sent() -> None:
    lease = Lease("j", 1, 0.3, sent_at=time.monotonic() - 0.25, margin_s=0.1)
    with pytest.raises(LeaseLost):
        lease.check()
    fresh = Lease("j", 1, 0.3, sent_at=time.monotonic() - 0.15, margin_s=0.1)
    fresh.renewed(time.monotonic())
    fresh.check()
    assert 0.25 < fresh.remaining_s <= 0.3


def test_a_lost_lease_stays_lost() -> None:
    lease = Lease("j", 7, 60, sent_at=time.monotonic(), margin_s=1)
    lease.lose("heartbeat refused: taken over")
    lease.renewed(time.monotonic())
    with pytest.raises(LeaseLost, match="job j, lease 7: heartbeat refused: taken over"):
        lease.check()
    expired = Lease("j", 1, 0.2, sent_at=time.monotonic() - 1, margin_s=0.05)
    with pytest.raises(LeaseLost):
        expired.check()
    expired.renewed(time.monotonic())  # a late acknowledgement does not bring it back once seen lost
    with pytest.raises(LeaseLost):
        expired.check()
