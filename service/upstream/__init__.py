"""Async HTTP clients for the vLLM runners."""
