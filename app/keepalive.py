"""How long the fleet reuses an idle connection: to a model server, an MCP server, a fetched site.

A server closes a keep-alive connection that stayed idle for its own timeout: 5 s for uvicorn
(vLLM's OpenAI server, the MCP Python SDK's servers), Node's http server and Hypercorn. A
request sent on such a connection just as the server closes it crosses the close on the wire:
the server resets the connection without reading the request, and the request fails unanswered.
httpx's own limit is 5 s too (the lean model transport had none), so a connection idle for
about 5 s met that race: a model call then waited half a second for its retry, and an MCP call
failed. Past this many seconds idle, a connection is closed and a new one opened instead, well
before such a server closes its end (``bench/keepalive.py`` counts the calls that met it).
"""

KEEPALIVE_EXPIRY_SECONDS = 4.0
