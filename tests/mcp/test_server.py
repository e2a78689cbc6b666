"""A small MCP server for toolpilot's tests (tests/suite/mcp.rs), on the official Python SDK.

    python test_server.py stdio
    python test_server.py http PORT_FILE [PORT]   # streamable HTTP on 127.0.0.1, port written to PORT_FILE

A different implementation than rmcp (toolpilot's client), so protocol mistakes show. Its tools
exercise what the client has to handle: text, structured and image results, an error result,
a slow call with or without progress, a crash in the middle of a call, a tool list that changes,
and what the process was started with (environment, working folder).
"""

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("toolpilot-test-server")

# The smallest valid PNG (1x1, transparent).
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


@server.tool(description="Echoes the text back, prefixed with 'echo: '.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Adds two integers; the result is structured content.")
def add(a: int, b: int) -> dict:
    return {"sum": a + b}


@server.tool(description="Always fails with the given message (an isError result).")
def fail(message: str) -> str:
    raise ToolError(f"failed on purpose: {message}")


@server.tool(description="Returns a tiny PNG image and a caption.")
def picture() -> list:
    return ["a one-pixel picture", Image(data=PNG, format="png")]


@server.tool(
    description="Sleeps for the given seconds, reporting progress every `every` seconds when > 0; "
    "with `marker`, writes MARKER.started when it starts and MARKER when it is cancelled."
)
async def slow(seconds: float, ctx: Context, every: float = 0, marker: str = "") -> str:
    if marker:
        open(marker + ".started", "w").close()
    waited = 0.0
    try:
        while waited < seconds:
            step = min(every if every > 0 else seconds, seconds - waited)
            await asyncio.sleep(step)
            waited += step
            if every > 0:
                await ctx.report_progress(waited, seconds, "sleeping")
    except asyncio.CancelledError:
        if marker:
            with open(marker, "w") as f:
                f.write("cancelled")
        raise
    return f"slept {seconds} s"


@server.tool(description="Exits the server process in the middle of the call.")
def crash() -> str:
    sys.stdout.flush()
    os._exit(3)


@server.tool(description="Adds a tool named NAME (it echoes) and tells the client the list changed.")
async def add_tool(name: str, ctx: Context) -> str:
    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"The tool {name}, added at run time.")
    try:
        await ctx.session.send_tool_list_changed()
    except Exception:  # noqa: BLE001 - a session without it uses the subscription bus
        pass
    try:
        await ctx.notify_tools_changed()
    except Exception:  # noqa: BLE001
        pass
    return f"added {name}"


@server.tool(description="The value of an environment variable of the server process, or <unset>.")
def env(name: str) -> str:
    return os.environ.get(name, "<unset>")


@server.tool(description="The value of a header of the HTTP request that made this call, or <none>.")
def header(name: str, ctx: Context) -> str:
    headers = ctx.headers or {}
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return "<none>"


@server.tool(description="Writes text to a file (a path the sandbox may or may not allow).")
def write(path: str, text: str) -> str:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e.strerror}") from e
    return f"wrote {path}"


@server.tool(description="Reads a file (a path the sandbox may or may not allow).")
def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from e


@server.tool(description="The server process's id.")
def pid() -> str:
    return str(os.getpid())


@server.tool(description="The server process's working folder.")
def cwd() -> str:
    return os.getcwd()


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
        return
    import uvicorn

    port_file = sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(tmp, port_file)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
