"""A small MCP server for tests/blackbox/mcp_failures.rs, on the pinned Python SDK (PyPI `mcp`).

Usage: failing.py <marks-dir> [stdio | http <port>]

Everything it observes is written as files in <marks-dir>, which the test reads:
- `calls-<tool>`: one line per call of that tool (so a replayed call shows as two lines);
- `cancelled-slow`: the time (epoch seconds) the `slow` call was cancelled;
- `sessions`: one line per Streamable HTTP session the server handed out;
- if `down` exists when the process starts, it exits at once (a server that cannot start).
"""

import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

marks = sys.argv[1]
if os.path.exists(os.path.join(marks, "down")):
    sys.exit(3)


def mark(name: str, line: str) -> None:
    with open(os.path.join(marks, name), "a") as f:
        f.write(line + "\n")


server = MCPServer("failing")


@server.tool()
def echo(message: str) -> str:
    """Echoes the message."""
    mark("calls-echo", message)
    return f"echo: {message}"


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps, then answers."""
    mark("calls-slow", str(seconds))
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        mark("cancelled-slow", repr(time.time()))
        raise
    return "slept"


@server.tool()
def crash() -> str:
    """Exits the server process in the middle of the call."""
    mark("calls-crash", "called")
    os._exit(1)


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe(target: str) -> str:
    """Wipes the target (annotated destructive)."""
    mark("calls-wipe", target)
    return f"wiped {target}"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Adds the tool `fresh` and tells the client its tool list changed."""

    def fresh(word: str) -> str:
        """A tool added while the server runs."""
        return f"fresh: {word}"

    server.add_tool(fresh)
    await ctx.session.send_tool_list_changed()
    return "added"


expired: set[str] = set()
seen: set[str] = set()


@server.tool()
def expire_sessions() -> str:
    """Forgets every session handed out so far: a request naming one gets 404."""
    expired.update(seen)
    return "expired"


def with_expiry(app):
    """Answers 404 to requests of expired sessions, as a server that lost them does."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope["headers"])
        sid = headers.get(b"mcp-session-id", b"").decode()
        if sid and sid in expired:
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": b'{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}'})
            return

        async def watching(message):
            if message["type"] == "http.response.start":
                for k, v in message.get("headers", []):
                    if k.lower() == b"mcp-session-id" and v.decode() not in seen:
                        seen.add(v.decode())
                        mark("sessions", v.decode())
            await send(message)

        return await app(scope, receive, watching)

    return wrapped


if len(sys.argv) > 2 and sys.argv[2] == "http":
    import uvicorn

    port = int(sys.argv[3])
    uvicorn.run(with_expiry(server.streamable_http_app()), host="127.0.0.1", port=port, log_level="warning")
else:
    server.run()
