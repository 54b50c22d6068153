"""Open the job queue the settings name: PostgreSQL by URL, else the SQLite file under the data dir."""

from __future__ import annotations

from indexer.queue import JobQueue
from indexer.queue_sqlite import SqliteJobQueue
from service.config import Settings


async def open_queue(settings: Settings) -> JobQueue:
    cfg = settings.indexer
    if cfg.queue_url is not None:
        from indexer.queue_postgres import PostgresJobQueue

        return await PostgresJobQueue.open(cfg.queue_url.get_secret_value(), pool_size=cfg.queue_pool_size)
    return SqliteJobQueue(settings.job_db_path)  # uploads beside it: settings.uploads_dir
