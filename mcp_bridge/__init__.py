"""The MCP adapter: FastMCP tools, resources and prompts over sandboxes.services.

No business logic lives here: each tool authenticates the caller (API key), calls one or two
services with the key's principal on channel `mcp`, and renders the result for an agent.
"""
