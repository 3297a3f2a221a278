"""Drives `agentd mcp --computer …` with the official MCP Python SDK's real client (tests/it/mcp.rs runs it).

    python computer_client.py -- AGENTD_COMMAND...

The scenario, on the mock desktop's login scene: initialize, list the nine computer tools, take a
screenshot, log in as alice with clicks, typing and keys, open Reports, then a call with bad arguments (a
tool error naming the field, no step) and a click off the screen (a step whose result is an error, with its
screenshot). Each check that fails is printed; the last line on stdout is one JSON document with what was
seen (the session's task id among it). Exit 0 when every check passed, 1 otherwise.
"""

import base64
import json
import re
import struct
import sys

import anyio
from checks import check, report, seen
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

TOOLS = ["screenshot", "click", "double_click", "type", "key", "scroll", "drag", "move", "wait"]

seen.update({"steps": []})


def png_size(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", data[16:24])


async def call(session, name, arguments, expect_error=False):
    result = await session.call_tool(name, arguments)
    texts = [b.text for b in result.content if getattr(b, "type", None) == "text"]
    images = [b for b in result.content if getattr(b, "type", None) == "image"]
    check(bool(result.is_error) == expect_error, f"{name} {arguments}: isError is {expect_error}", texts)
    entry = {"tool": name, "error": bool(result.is_error), "text": texts}
    if images:
        data = base64.b64decode(images[0].data)
        entry["image"] = {"mime": images[0].mime_type, "size": png_size(data)}
    seen["steps"].append(entry)
    return result, texts, images


async def scenario(session):
    init = await session.initialize()
    check(init.protocol_version == "2025-11-25", "the protocol version is 2025-11-25", init.protocol_version)
    found = re.search(r"recorded as agentd task (\S+?)\.?$", init.instructions or "")
    check(found is not None, "the instructions name the session's task", init.instructions)
    seen["task_id"] = found.group(1) if found else None

    listed = await session.list_tools()
    names = [tool.name for tool in listed.tools]
    seen["tools"] = names
    check(names == TOOLS, "the computer tools are listed", names)
    click = next((t for t in listed.tools if t.name == "click"), None)
    check(click is not None and click.input_schema.get("required") == ["x", "y"], "click requires x and y",
          click.input_schema if click else None)

    _, texts, images = await call(session, "screenshot", {})
    check(len(images) == 1 and images[0].mime_type == "image/png", "a screenshot is a PNG image")
    if images:
        check(png_size(base64.b64decode(images[0].data)) == (1280, 800), "the whole 1280x800 screen",
              png_size(base64.b64decode(images[0].data)))
    first = json.loads(texts[0]) if texts else {}
    check(first.get("ok") is True and isinstance(first.get("step"), int), "the screenshot is a step", first)

    for name, arguments in [
        ("click", {"x": 640, "y": 370}),
        ("type", {"text": "alice"}),
        ("key", {"keys": ["Tab"]}),
        ("type", {"text": "hunter2"}),
        ("key", {"keys": ["Return"]}),
        ("click", {"x": 471, "y": 434}),
    ]:
        _, texts, images = await call(session, name, arguments)
        check(len(images) == 1, f"{name} returns the screenshot after it")

    _, texts, images = await call(session, "click", {"x": 5}, expect_error=True)
    check(any("`y`" in t for t in texts), "bad arguments name the missing field", texts)
    check(not images, "bad arguments take no step")

    _, texts, images = await call(session, "click", {"x": 99999, "y": 5}, expect_error=True)
    check(len(images) == 1, "a refused action still shows the screen")
    refused = json.loads(texts[0]) if texts else {}
    check(refused.get("ok") is False and refused.get("message"), "the loop's refusal is the result", refused)


async def main():
    if sys.argv[1] != "--":
        raise SystemExit("usage: computer_client.py -- AGENTD_COMMAND...")
    command = sys.argv[2:]
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await scenario(session)
    report()


anyio.run(main)
