"""The pipeline's own fence, without a heartbeat to help: an embedding answer that arrives after the lease
ran out (the answer held at the network edge past the lease) is never written to the store or the queue,
and no further embedding request is sent. Real MiniLM runner, real Qdrant Edge store, real SQLite queue; the
lease runs on a clock the test steps, so it runs out exactly while the answer is held, however slow the machine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from indexer.lease import Lease
from indexer.queue import LeaseLost
from indexer.spec import IngestSpec, PathSource
from indexer.worker import Worker
from service.api.app import build_services
from service.api.metrics import Metrics
from service.config import Settings
from service.profiles import MINILM
from service.sparse.config import SparseConfig
from tests.support.embed_proxy import embed_proxy
from tests.support.lease_clock import ManualClock
from tests.support.runners import RunnerURLs

LEASE_S = 3.0


async def test_an_answer_that_arrives_after_the_lease_ran_out_is_never_written(
    runners: RunnerURLs, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(6):
        (folder / f"d{i}.txt").write_text(f"lease document {i} is about topic {i}.")
    with embed_proxy(runners.minilm_embed, hold_from=1) as proxy:
        settings = Settings(profile="minilm", data_dir=tmp_path / "data", runners={"embed_url": proxy.url},
                            indexer={"batch_tokens": 8, "inflight_batches": 1})  # one document per request
        services = await build_services(settings, Metrics())
        try:
            await services.store.create_collection("lease", dimensions=384, model=MINILM.embedding.name,
                                                   sparse=SparseConfig())
            worker = Worker(services.jobs, services.store, services.embedder, settings, services.fetcher)
            submitted = await services.jobs.submit("lease", IngestSpec(source=PathSource(path=str(folder))).model_dump(
                mode="json"))
            clock = ManualClock()
            sent = clock()
            job = await services.jobs.claim("w", 600, max_attempts=3)  # the queue's lease is long: only ours runs out
            assert job is not None and job.id == submitted.id
            lease = Lease(job.id, job.lease_token, LEASE_S, sent_at=sent, margin_s=LEASE_S / 4, clock=clock)
            run = asyncio.create_task(worker.pipeline.run(job, asyncio.Event(), lease))
            held = await asyncio.to_thread(proxy.wait_for_held, 120)  # the second request, its answer held
            clock.advance(LEASE_S)  # no heartbeat meanwhile: the lease runs out while the answer is held
            proxy.release()
            with pytest.raises(LeaseLost, match="no heartbeat acknowledged"):
                await run  # it cancels and gathers its batches before raising: nothing of it lands after this

            assert [c.texts for c in proxy.calls] == [["lease document 0 is about topic 0."], held.texts]
            assert held.answered is not None  # the answer did reach the pipeline
            assert set(await services.store.doc_states("lease")) == {"d0.txt"}
            stats = (await services.store.describe("lease")).sparse_stats
            assert stats is not None and stats.documents == 1
            assert await services.jobs.finished_documents(job.id) == {"d0.txt"}
        finally:
            await services.aclose()
