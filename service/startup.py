"""What every long-running ragserve process does once it has started (the API's and the indexing worker's)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Move what start-up built (modules, clients, schemas) to the collector's permanent generation. Each full
    collection walks every tracked object while holding the GIL, which froze the event loop during a large job;
    frozen objects are never walked (docs/benchmarks.md has the figures)."""
    gc.collect()
    gc.freeze()
