"""Building the MCP server leaves the process's logging alone (the SDK's constructor calls basicConfig)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("mcp")

from service.api.mcp.tools import build_server  # noqa: E402


def test_building_the_server_leaves_the_root_logger_as_it_was() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    root.handlers[:] = []  # as in `ragserve demo`: nothing configured yet (pytest's own handlers set aside)
    root.setLevel(logging.WARNING)
    try:
        build_server(max_top_k=200)
        assert (root.handlers, root.level) == ([], logging.WARNING)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
