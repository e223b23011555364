"""MCP tools: servers declared per request or configured, listed, called and approved.

The SDK is async-only; :mod:`app.tools.mcp.client` keeps it behind one synchronous client that
owns its event loop (STYLE.md rule 40). Nothing here imports the SDK at module level, so the
gateway and the inference worker load this package cheaply.
"""
