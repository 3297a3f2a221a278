"""Drives agentd's MCP server with the official MCP Python SDK's real client (tests/it/mcp.rs runs it).

    python client.py stdio -- AGENTD_COMMAND...   starts `agentd mcp …` over stdio
    python client.py http URL TOKEN               the daemon's Streamable HTTP endpoint

The scenario: initialize, list the tools, run_task on the mock desktop with a scripted model (progress per
step, the outcome, the last screenshot as an image), run_task with an output schema (structured content), a
bad task (a tool error naming the field), cancellation of a running run_task (the task ends cancelled), and
the other tools on those tasks. Each check that fails is printed; the last line on stdout is one JSON document
with what was seen. Exit 0 when every check passed, 1 otherwise.
"""

import base64
import json
import sys
import time

import anyio
from checks import check, report, seen
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

TOOLS = {"run_task", "submit_task", "get_task", "list_tasks", "answer", "approve", "reject", "cancel", "send_message",
         "lease_computer", "release_computer",
         # The computer tools, usable once lease_computer leased a computer (tests/mcp/lease_client.py).
         "screenshot", "click", "double_click", "type", "key", "scroll", "drag", "move", "wait"}

LOGIN_SCRIPT = {
    "turns": [
        {"say": "Typing the username.", "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
        {"say": "Now the password.", "actions": [{"type": "keypress", "keys": ["Tab"]}, {"type": "type", "text": "hunter2"},
                                                {"type": "keypress", "keys": ["Return"]}]},
        {"say": "Opening Reports.", "actions": [{"type": "click", "x": 471, "y": 434}]},
        {"say": "Done.", "complete": {"success": True, "summary": "Logged in as alice and opened Reports"}},
    ]
}

OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "total": {"type": "number"}},
    "required": ["order", "total"],
    "additionalProperties": False,
}



def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", None) == "text")


async def scenario(session, mode, suffix):
    init = await session.initialize()
    seen["protocol_version"] = init.protocol_version
    seen["server"] = init.server_info.name
    check(init.protocol_version == "2025-11-25", "the protocol version is 2025-11-25", init.protocol_version)
    check(init.server_info.name == "agentd", "the server is agentd", init.server_info.name)
    check(init.capabilities.tools is not None, "the server offers tools")

    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    seen["tools"] = sorted(tools)
    check(set(tools) == TOOLS, "the task tools are listed", sorted(tools))
    if "run_task" in tools:
        run = tools["run_task"]
        check(run.input_schema.get("required") == ["instructions"], "run_task requires instructions", run.input_schema.get("required"))
        check(run.annotations is not None and run.annotations.destructive_hint is True, "run_task is destructive")
        check(run.annotations is not None and run.annotations.read_only_hint is False, "run_task is not read-only")
    for name in ("get_task", "list_tasks"):
        if name in tools:
            hints = tools[name].annotations
            check(hints is not None and hints.read_only_hint is True, f"{name} is read-only")

    # run_task with progress: the mock login with the scripted model, four steps.
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    login_id = f"mcp-login-{suffix}"
    task = {
        "id": login_id,
        "instructions": "Log in as alice and open Reports",
        "computer": {"provider": "mock", "scene": "login"},
        "model": {"provider": "scripted", "script": LOGIN_SCRIPT},
        "limits": {"max_steps": 10, "timeout_secs": 120},
    }
    started = time.monotonic()
    result = await session.call_tool("run_task", task, progress_callback=on_progress)
    seen["run_task_seconds"] = round(time.monotonic() - started, 3)
    seen["run_progress"] = progress
    check(not result.is_error, "run_task succeeded", text_of(result))
    try:
        summary = json.loads(text_of(result))
    except ValueError:
        summary = {}
    seen["run_summary"] = summary
    check(summary.get("state") == "succeeded", "the outcome says succeeded", summary)
    check(summary.get("id") == login_id, "the outcome names the task", summary.get("id"))
    check((summary.get("outcome") or {}).get("summary") == "Logged in as alice and opened Reports", "the model's summary is the outcome's")
    images = [block for block in result.content if getattr(block, "type", None) == "image"]
    check(len(images) == 1, "the last screenshot comes as one image", len(images))
    if images:
        data = base64.b64decode(images[0].data)
        check(images[0].mime_type == "image/png" and data[:8] == b"\x89PNG\r\n\x1a\n", "the image is a PNG", images[0].mime_type)
        seen["screenshot_bytes"] = len(data)
    # The notifications came before the result; the SDK hands each to its callback in a task of its own.
    with anyio.move_on_after(5):
        while len(progress) < 4:
            await anyio.sleep(0.01)
    check(len(progress) == 4, "one progress notification per step (4 steps)", progress)
    values = [p["progress"] for p in progress]
    check(values == sorted(values) and len(set(values)) == len(values), "progress increases", values)
    check(all(p["message"] for p in progress), "each notification says what the step did", progress)
    check(result.structured_content is None, "no structured content without an output schema", result.structured_content)

    # Structured output: the task's output schema, the model's output as structured content.
    output = {"order": "004512", "total": 99.5}
    result = await session.call_tool("run_task", {
        "id": f"mcp-output-{suffix}",
        "instructions": "Read the order number and the total",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": True, "summary": "read", "output": output}}]}},
        "output_schema": OUTPUT_SCHEMA,
    })
    seen["structured"] = result.structured_content
    check(not result.is_error, "the task with an output schema succeeded", text_of(result))
    check(result.structured_content == output, "the output is the structured content", result.structured_content)

    # A bad task: a tool error naming the field.
    result = await session.call_tool("run_task", {"instructions": "x", "limits": {"max_steps": 0}})
    seen["bad_task"] = text_of(result)
    check(result.is_error, "a bad task is a tool error")
    check("max_steps" in text_of(result), "the error names the field", text_of(result))

    # Cancellation: a long task, cancelled once its first step has finished.
    cancel_id = f"mcp-cancel-{suffix}"
    waits = {"turns": [{"say": f"waiting {i}", "actions": [{"type": "wait", "duration_ms": 500}]} for i in range(60)]}
    first_step = anyio.Event()
    cancelled_progress = []

    async def on_cancel_progress(value, total, message):
        cancelled_progress.append(value)
        first_step.set()

    async with anyio.create_task_group() as group:
        async def call():
            await session.call_tool("run_task", {
                "id": cancel_id,
                "instructions": "Wait for ever",
                "computer": {"provider": "mock", "scene": "blank"},
                "model": {"provider": "scripted", "script": waits},
                "limits": {"max_steps": 100, "timeout_secs": 300},
            }, progress_callback=on_cancel_progress)
            check(False, "the cancelled run_task returned a result")

        group.start_soon(call)
        with anyio.fail_after(60):
            await first_step.wait()
        group.cancel_scope.cancel()
    state = None
    with anyio.move_on_after(60):
        while state != "cancelled":
            result = await session.call_tool("get_task", {"id": cancel_id})
            try:
                doc = json.loads(text_of(result))
            except ValueError:
                doc = {}
            state = doc.get("state")
            if state in ("succeeded", "failed"):
                break
            await anyio.sleep(0.1)
    seen["cancelled_state"] = state
    check(state == "cancelled", "cancelling the request cancels the task", state)

    # The other tools on those tasks.
    result = await session.call_tool("get_task", {"id": login_id})
    doc = json.loads(text_of(result)) if not result.is_error else {}
    check(doc.get("state") == "succeeded" and len(doc.get("steps") or []) == 4, "get_task shows the task and its steps", text_of(result)[:300])
    result = await session.call_tool("list_tasks", {"limit": 50})
    listed_ids = [t.get("id") for t in json.loads(text_of(result)).get("tasks", [])] if not result.is_error else []
    check(login_id in listed_ids and cancel_id in listed_ids, "list_tasks lists them", listed_ids)
    result = await session.call_tool("list_tasks", {"state": "cancelled"})
    states = {t.get("state") for t in json.loads(text_of(result)).get("tasks", [])} if not result.is_error else set()
    check(states == {"cancelled"}, "list_tasks filters by state", states)
    result = await session.call_tool("cancel", {"id": login_id})
    check(not result.is_error and "already_finished" in text_of(result), "cancelling a finished task says so", text_of(result))
    result = await session.call_tool("get_task", {"id": "no-such-task"})
    check(result.is_error, "an unknown task is a tool error", text_of(result))

    submitted_id = f"mcp-submit-{suffix}"
    result = await session.call_tool("submit_task", {
        "id": submitted_id,
        "instructions": "Done at once",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [{"complete": {"success": True, "summary": "done"}}]}},
    })
    check(not result.is_error and json.loads(text_of(result)).get("id") == submitted_id, "submit_task returns the id", text_of(result))
    state = None
    with anyio.move_on_after(60):
        while state not in ("succeeded", "failed", "cancelled"):
            doc = json.loads(text_of(await session.call_tool("get_task", {"id": submitted_id})))
            state = doc.get("state")
            await anyio.sleep(0.1)
    check(state == "succeeded", "a submitted task runs to its end", state)

    if mode == "local":
        # Nobody to ask in this process: the question ends the run, and its outcome says what was asked.
        result = await session.call_tool("run_task", {
            "instructions": "Ask which account",
            "computer": {"provider": "mock", "scene": "blank"},
            "model": {"provider": "scripted", "script": {"turns": [
                {"say": "asking", "calls": [{"name": "ask_human", "arguments": {"question": "Which account?"}}]},
                {"complete": {"success": True, "summary": "answered"}}]}},
        })
        check(result.is_error and "Which account?" in text_of(result), "a question ends a local run, saying what it asked", text_of(result))
        result = await session.call_tool("answer", {"id": login_id, "text": "hello"})
        check(result.is_error and "--local" in text_of(result), "answer is refused with --local, saying why", text_of(result))
    else:
        # The model asks a question: run_task tells the client (a notification half a step on) and waits; the
        # answer tool, in another request, resumes the task, and run_task returns its outcome.
        ask_id = f"mcp-ask-{suffix}"
        waiting = anyio.Event()
        notes = []
        outcome = {}

        async def on_ask_progress(value, total, message):
            notes.append({"progress": value, "message": message})
            if message and message.startswith("waiting for a human"):
                waiting.set()

        async with anyio.create_task_group() as group:
            async def asking():
                outcome["result"] = await session.call_tool("run_task", {
                    "id": ask_id,
                    "instructions": "Ask which account",
                    "computer": {"provider": "mock", "scene": "blank"},
                    "model": {"provider": "scripted", "script": {"turns": [
                        {"say": "asking", "calls": [{"name": "ask_human", "arguments": {"question": "Which account?"}}]},
                        {"complete": {"success": True, "summary": "answered"}}]}},
                }, progress_callback=on_ask_progress)

            group.start_soon(asking)
            with anyio.fail_after(60):
                await waiting.wait()
            result = await session.call_tool("answer", {"id": ask_id, "text": "alice"})
            check(not result.is_error, "answer resumes the waiting task", text_of(result))
        seen["ask_progress"] = notes
        check(any("Which account?" in (n["message"] or "") for n in notes), "the waiting notification carries the question", notes)
        values = [n["progress"] for n in notes]
        check(values == sorted(values) and len(set(values)) == len(values), "progress increases across the wait", values)
        asked = outcome.get("result")
        check(asked is not None and not asked.is_error, "run_task returns once the answered task ends", asked and text_of(asked))

        result = await session.call_tool("send_message", {"id": login_id, "text": "now open Settings"})
        check(not result.is_error and json.loads(text_of(result)).get("turn") == 1, "send_message queues turn 1", text_of(result))
        result = await session.call_tool("answer", {"id": cancel_id, "text": "hello"})
        check(result.is_error, "answering a task that asks nothing is refused", text_of(result))


async def main():
    kind = sys.argv[1]
    if kind == "stdio":
        command = sys.argv[sys.argv.index("--") + 1:]
        mode = "local" if "--local" in command else "daemon"
        params = StdioServerParameters(command=command[0], args=command[1:], env={"AGENTD_LOG": "warn"})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await scenario(session, mode, mode)
    elif kind == "http":
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        url, token = sys.argv[2], sys.argv[3]
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await scenario(session, "daemon", "http")
    else:
        raise SystemExit(f"unknown transport {kind}")


anyio.run(main)
report()
