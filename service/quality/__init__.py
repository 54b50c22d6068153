"""Retrieval quality in production: search ids and their short records, feedback, the query log, and the
quality series of /metrics (docs/quality.md)."""
