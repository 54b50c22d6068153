"""What ``create_app`` does when the app starts."""

from __future__ import annotations

import gc

from service.api.app import create_app
from service.config import Settings


async def test_what_every_routers_lifespan_built_is_frozen(minilm_settings: Settings) -> None:
    """The MCP router's lifespan builds its server (the SDK's pydantic models, about 46,000 objects) inside the
    app's own; frozen before it, they stayed where each full collection walks them, about 40 ms holding the
    GIL in the soak's 20k-chunk job. ``gc.get_objects()`` lists what the collector walks: not the frozen."""
    app = create_app(minilm_settings)
    async with app.router.lifespan_context(app) as state:
        manager = state["mcp"]
        assert manager is not None and gc.is_tracked(manager)
        assert not any(o is manager for o in gc.get_objects())
