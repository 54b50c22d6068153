"""HTTP routers: they parse and dispatch; the logic lives in the domain services."""
