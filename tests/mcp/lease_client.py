"""Leases a desktop of the daemon's pool over Streamable HTTP with the official MCP Python SDK's real client
(tests/it/mcp.rs runs it).

    python lease_client.py URL TOKEN DESKTOP

The scenario: session A leases DESKTOP (`lease_computer`, with the secret `password` read on the daemon from
$AGENTD_TEST_PORTAL_PASSWORD) and gets the first screenshot; while A holds it, session B's `lease_computer` of
the same desktop is a tool error, and so is a plain `POST /v1/sessions` for it (409 `desktop_leased`); a computer
tool of B, which holds nothing, is a tool error too. A clicks 12 times on the unchanged background (no stuck-loop
guard ends a session), logs in as alice on the mock desktop's login scene —
typing the password by its placeholder — opens Reports, and releases the computer. Each check that fails is
printed; the last line on stdout is one JSON document with what was seen. Exit 0 when every check passed.
"""

import base64
import json
import sys

import anyio
from checks import check, images_of, report, seen, texts_of
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

seen.update({"steps": []})


async def scenario(a, b, http, url, desktop):
    for session in (a, b):
        await session.initialize()
    names = [tool.name for tool in (await a.list_tools()).tools]
    check({"lease_computer", "release_computer", "screenshot", "click", "type"} <= set(names),
          "the lease and computer tools are listed beside the task tools", names)

    result = await b.call_tool("screenshot", {})
    check(result.is_error and any("lease_computer" in t for t in texts_of(result)),
          "a computer tool without a leased computer is a tool error naming lease_computer", texts_of(result))

    leased = await a.call_tool("lease_computer", {
        "desktop": desktop,
        "instructions": "log in as alice",
        "secrets": {"password": {"env": "AGENTD_TEST_PORTAL_PASSWORD"}},
    })
    texts = texts_of(leased)
    check(not leased.is_error, "lease_computer leases the desktop", texts)
    task_id = json.loads(texts[0]).get("task_id") if texts else None
    seen["task_id"] = task_id
    images = images_of(leased)
    check(len(images) == 1 and base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n",
          "the lease returns the first screenshot as a PNG", [i.mime_type for i in images])

    second = await b.call_tool("lease_computer", {"desktop": desktop})
    check(second.is_error and any("leased" in t for t in texts_of(second)),
          "a second session's lease of the same desktop is refused", texts_of(second))
    seen["second_lease"] = texts_of(second)
    base = url.rsplit("/mcp", 1)[0]
    raw = await http.post(f"{base}/v1/sessions", json={"desktop": desktop})
    seen["second_post"] = {"status": raw.status_code, "body": raw.json()}
    check(raw.status_code == 409 and raw.json()["error"]["code"] == "desktop_leased",
          "POST /v1/sessions for a leased desktop is 409 desktop_leased", seen["second_post"])

    # A client that pokes at an unchanged screen for a while (here: clicks on the background) is not a stuck
    # model: the session's task does not stop it.
    for i in range(12):
        poked = await a.call_tool("click", {"x": 5 + i % 2, "y": 5})
        check(not poked.is_error, f"click {i} on an unchanged screen is carried out", texts_of(poked))

    for name, arguments in [
        ("click", {"x": 640, "y": 370}),
        ("type", {"text": "alice"}),
        ("key", {"keys": ["Tab"]}),
        ("type", {"text": "<secret:password>"}),
        ("key", {"keys": ["Return"]}),
        ("click", {"x": 471, "y": 434}),
    ]:
        result = await a.call_tool(name, arguments)
        step = json.loads(texts_of(result)[0]) if texts_of(result) else {}
        seen["steps"].append({"tool": name, "error": bool(result.is_error), "result": step})
        check(not result.is_error and len(images_of(result)) == 1, f"{name} {arguments} acts and shows the screen",
              texts_of(result))

    released = await a.call_tool("release_computer", {})
    check(not released.is_error, "release_computer ends the session", texts_of(released))
    again = await a.call_tool("click", {"x": 1, "y": 1})
    check(again.is_error, "after the release the computer tools hold nothing", texts_of(again))


async def main():
    url, token, desktop = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with streamable_http_client(url, http_client=http) as (read_a, write_a):
            async with ClientSession(read_a, write_a) as a:
                async with streamable_http_client(url, http_client=http) as (read_b, write_b):
                    async with ClientSession(read_b, write_b) as b:
                        await scenario(a, b, http, url, desktop)
    report()


anyio.run(main)
