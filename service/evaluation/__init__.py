"""Retrieval-quality evaluation on BEIR-layout datasets, through the running service's HTTP API."""
