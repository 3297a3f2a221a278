"""Calls `agentd mcp --computer …`'s tools in a given order with the official MCP Python SDK's real client
and reports every result whole (tests/it/mcp.rs checks them: screenshots decoded, the desktop asked).

    python computer_steps.py STEPS_JSON -- AGENTD_COMMAND...

STEPS_JSON is a list of `{"tool": NAME, "arguments": {...}}`. The last line on stdout is one JSON document:
`{"seen": {"task_id", "results": [{"error", "text", "image"?: base64}]}, "failures": [...]}`. Exit 0 when
every call was answered, 1 otherwise.
"""

import json
import re
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main():
    steps = json.loads(sys.argv[1])
    if sys.argv[2] != "--":
        raise SystemExit("usage: computer_steps.py STEPS_JSON -- AGENTD_COMMAND...")
    command = sys.argv[3:]
    seen = {"results": []}
    failures = []
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            found = re.search(r"recorded as agentd task (\S+?)\.?$", init.instructions or "")
            seen["task_id"] = found.group(1) if found else None
            for step in steps:
                with anyio.fail_after(60):
                    result = await session.call_tool(step["tool"], step.get("arguments", {}))
                entry = {
                    "error": bool(result.is_error),
                    "text": "".join(b.text for b in result.content if getattr(b, "type", None) == "text"),
                }
                images = [b for b in result.content if getattr(b, "type", None) == "image"]
                if images:
                    entry["image"] = images[0].data
                seen["results"].append(entry)
    if seen["task_id"] is None:
        failures.append("the instructions name no task")
    print(json.dumps({"seen": seen, "failures": failures}))
    sys.exit(1 if failures else 0)


anyio.run(main)
