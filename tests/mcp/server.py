"""An MCP server on the official MCP Python SDK, whose tools a task's model calls through agentd
(tests/it/mcp_tools.rs starts it).

    python server.py stdio                 on stdin/stdout (agentd starts it)
    python server.py http PORT_FILE        Streamable HTTP at http://127.0.0.1:PORT/mcp; the port is written to
                                           PORT_FILE once the server listens

Tools: `lookup` (text and structured content), `swatch` (an image), `secret_echo` (says whether the argument
is the value of AGENTD_TEST_MCP_SECRET, never the value), `flood` (a megabyte of text), `hang` (never answers),
`crash` (the process exits), `fail` (a tool error).
"""

import os
import struct
import sys
import time
import zlib
from typing import TypedDict

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("agentd-test-tools")


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid PNG, written by hand (the SDK's environment has no imaging library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * width
    raw = row * height
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


class Order(TypedDict):
    order: str
    state: str
    total: float


@server.tool()
def lookup(order: str) -> Order:
    """Looks an order up: its state and total (structured content, and the same as text)."""
    return {"order": order, "state": "shipped", "total": 42.5}


@server.tool()
def swatch(width: int, height: int) -> Image:
    """A red swatch of the given size, as a PNG image."""
    return Image(data=png(width, height, (220, 20, 20)), format="png")


@server.tool()
def secret_echo(value: str) -> str:
    """Says whether `value` is the secret this server was given."""
    return "match" if value == os.environ.get("AGENTD_TEST_MCP_SECRET", "\0") else "no match"


@server.tool()
def flood() -> str:
    """A megabyte of text."""
    return "x" * (1024 * 1024)


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"


@server.tool()
def crash() -> str:
    """Ends the server's process."""
    os._exit(3)


@server.tool()
def fail() -> str:
    """Always fails, as a tool failure the model reads."""
    raise ToolError("the order book is closed")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import socket

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
        server.run("streamable-http", host="127.0.0.1", port=port)
