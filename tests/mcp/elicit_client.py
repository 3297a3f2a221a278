"""Answers a task's question and approval hold inline through MCP elicitation, with the official MCP Python
SDK's real client (tests/it/mcp.rs runs it against a test daemon).

    python elicit_client.py -- AGENTD_COMMAND...

run_task on the mock desktop with a scripted model that asks "Which colour?" (ask_human), then holds the
typing of the answer for approval: the client declares the elicitation capability and answers the first
form with "blue" and the second by approving. Each check that fails is printed; the last line on stdout is
one JSON document with what was seen. Exit 0 when every check passed, 1 otherwise.
"""

import json
import sys

import anyio
from checks import check, report, seen
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client

SCRIPT = {
    "turns": [
        {"say": "I need a colour.", "calls": [{"name": "ask_human", "arguments": {"question": "Which colour?"}}]},
        {"ask_human": "may I type the colour?", "actions": [{"type": "type", "text": "blue"}]},
        {"complete": {"success": True, "summary": "typed the colour"}},
    ]
}

seen.update({"elicitations": []})


async def on_elicit(context, params):
    schema = params.requested_schema or {}
    fields = sorted((schema.get("properties") or {}).keys())
    seen["elicitations"].append({"message": params.message, "fields": fields})
    if "answer" in fields:
        return types.ElicitResult(action="accept", content={"answer": "blue"})
    if "approve" in fields:
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action="decline")


async def main():
    if sys.argv[1] != "--":
        raise SystemExit("usage: elicit_client.py -- AGENTD_COMMAND...")
    command = sys.argv[2:]
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
            await session.initialize()
            task = {
                "id": "mcp-elicit",
                "instructions": "Ask which colour, then type it",
                "computer": {"provider": "mock", "scene": "blank"},
                "model": {"provider": "scripted", "script": SCRIPT},
                "limits": {"max_steps": 10, "timeout_secs": 120},
            }
            with anyio.fail_after(120):
                result = await session.call_tool("run_task", task)
            text = "".join(b.text for b in result.content if getattr(b, "type", None) == "text")
            check(not result.is_error, "run_task succeeded after the answers", text)
            outcome = json.loads(text) if text.startswith("{") else {}
            seen["outcome"] = outcome
    messages = [e["message"] for e in seen["elicitations"]]
    check(len(messages) == 2, "two elicitations: the question, then the approval", messages)
    check(any("Which colour?" in m for m in messages), "the question is asked as the model put it", messages)
    check(any("may I type the colour?" in m for m in messages), "the approval names the hold's reason", messages)
    report()


anyio.run(main)
