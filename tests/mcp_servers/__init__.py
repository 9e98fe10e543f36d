"""MCP servers and registries the MCP tests drive."""
