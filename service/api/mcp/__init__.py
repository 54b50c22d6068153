"""ragserve as a Model Context Protocol server: its search and its collections as MCP tools."""
