"""The indexing worker: sources → parsed documents → token-aware chunks → embeddings → Qdrant.

Jobs wait in a durable queue (:mod:`indexer.queue`); a worker (:mod:`indexer.worker`) claims them and runs
the pipeline (:mod:`indexer.pipeline`), which is idempotent: re-running a job, or resuming one after a
crash, embeds only documents whose content changed.
"""
