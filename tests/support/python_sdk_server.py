"""A server built on the MCP project's Python SDK (pip `mcp`, pinned in .ci/run): one tool, `add`,
after an optional start-up delay in seconds (argv[1]) — a slow start as a busy machine gives."""
import sys
import time

time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)

from mcp.server.mcpserver import MCPServer  # noqa: E402  (mcp 2.x)

app = MCPServer("tern-test")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


app.run()
