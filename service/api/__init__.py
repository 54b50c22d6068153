"""The HTTP query API (FastAPI)."""
