"""Computer tools' round trips through MCP, side by side on one X display, with the official MCP Python SDK's
client for every server (benches/mcp_side_by_side.sh runs it):

- agentd over stdio: `agentd mcp --local --computer FILE` (the local X11 provider; every step recorded with its
  screenshot, as any task's);
- agentd's daemon over Streamable HTTP: `lease_computer` on its `/mcp` (a pool desktop on the same display;
  every step journaled and its screenshot stored) — when --daemon-url is given;
- cua computer-server's `/mcp` (Streamable HTTP; its `computer_*` tools, nothing recorded).

Measured per server, interleaved round by round so that every server sees the same machine: a screenshot, and
a click followed by the screenshot that shows its effect (agentd's `click` returns it; cua's `computer_click`
answers without one, so a `computer_screenshot` follows). agentd waits after an action until the screen has
been quiet for 100 ms (`[settle]`), so that the screenshot shows the action's effect; cua takes it at once: with
--config-no-settle a second agentd session runs with `[settle] enabled = false`, cua's way. Prints the median,
p95 and mean of each in ms.

With --task FILE: `run_task`'s overhead over `agentd run` — the task (a scripted model on the mock desktop) run
10 times with `run_task` in one `agentd mcp --local` session (the call, as the client waits for it) and 10 times
as `agentd run FILE` (the process, start to exit), medians side by side.

    python mcp_round_trip.py --agentd BIN --config CFG --computer FILE --cua URL [--rounds N]
                             [--daemon-url URL --token TOKEN --desktop NAME] [--task FILE]
"""

import argparse
import base64
import json
import statistics
import sys
import time
from contextlib import AsyncExitStack

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def timed(call):
    start = time.perf_counter()
    result = await call()
    elapsed = (time.perf_counter() - start) * 1000
    if result.is_error:
        raise SystemExit(f"a call failed: {[getattr(b, 'text', '') for b in result.content]}")
    images = [b for b in result.content if getattr(b, "type", None) == "image"]
    return elapsed, (len(base64.b64decode(images[0].data)) if images else 0)


class Agentd:
    def __init__(self, name, session):
        self.name, self.session = name, session

    async def screenshot(self):
        return await timed(lambda: self.session.call_tool("screenshot", {}))

    async def click(self, x, y):
        return await timed(lambda: self.session.call_tool("click", {"x": x, "y": y}))


class Cua:
    name = "cua computer-server /mcp"

    def __init__(self, session):
        self.session = session

    async def screenshot(self):
        return await timed(lambda: self.session.call_tool("computer_screenshot", {}))

    async def click(self, x, y):
        start = time.perf_counter()
        clicked = await self.session.call_tool("computer_click", {"x": x, "y": y})
        if clicked.is_error:
            raise SystemExit(f"cua's click failed: {clicked.content}")
        shot, size = await self.screenshot()
        return (time.perf_counter() - start) * 1000, size


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agentd", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--config-no-settle", help="a config with [settle] enabled = false, for a second session")
    parser.add_argument("--computer", required=True)
    parser.add_argument("--cua", required=True)
    parser.add_argument("--daemon-url")
    parser.add_argument("--token")
    parser.add_argument("--desktop")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--task")
    args = parser.parse_args()
    if args.task:
        await run_task_overhead(args)

    async with AsyncExitStack() as stack:
        servers = []
        params = StdioServerParameters(
            command=args.agentd, args=["--config", args.config, "mcp", "--local", "--computer", args.computer])
        read, write = await stack.enter_async_context(stdio_client(params))
        local = await stack.enter_async_context(ClientSession(read, write))
        await local.initialize()
        servers.append(Agentd("agentd mcp --local --computer (stdio)", local))
        if args.config_no_settle:
            params = StdioServerParameters(
                command=args.agentd,
                args=["--config", args.config_no_settle, "mcp", "--local", "--computer", args.computer])
            read, write = await stack.enter_async_context(stdio_client(params))
            raw = await stack.enter_async_context(ClientSession(read, write))
            await raw.initialize()
            servers.append(Agentd("agentd mcp --local, [settle] off (stdio)", raw))

        if args.daemon_url:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.token}"}, timeout=60))
            read, write, *_ = await stack.enter_async_context(streamable_http_client(args.daemon_url, http_client=http))
            daemon = await stack.enter_async_context(ClientSession(read, write))
            await daemon.initialize()
            leased = await daemon.call_tool("lease_computer", {"desktop": args.desktop})
            if leased.is_error:
                raise SystemExit(f"lease_computer failed: {leased.content}")
            servers.append(Agentd("agentd daemon /mcp lease_computer (HTTP)", daemon))

        cua_http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60))
        read, write, *_ = await stack.enter_async_context(streamable_http_client(args.cua, http_client=cua_http))
        cua = await stack.enter_async_context(ClientSession(read, write))
        await cua.initialize()
        servers.append(Cua(cua))

        # Warm-up: a few of each, not counted.
        for server in servers:
            for _ in range(3):
                await server.screenshot()
                await server.click(100, 100)

        times = {server.name: {"screenshot": [], "click + screenshot": []} for server in servers}
        sizes = {server.name: [] for server in servers}
        for round_ in range(args.rounds):
            x, y = (200, 200) if round_ % 2 else (400, 300)
            for server in servers:
                elapsed, size = await server.screenshot()
                times[server.name]["screenshot"].append(elapsed)
                sizes[server.name].append(size)
                elapsed, _ = await server.click(x, y)
                times[server.name]["click + screenshot"].append(elapsed)

    print(f"{args.rounds} rounds, interleaved; ms per round trip as the MCP client sees it")
    print(f"{'server':44} {'round trip':20} {'median':>8} {'p95':>8} {'mean':>8} {'PNG bytes':>10}")
    report = {}
    for name, measured in times.items():
        for what, values in measured.items():
            median, p95, mean = statistics.median(values), percentile(values, 95), statistics.mean(values)
            report.setdefault(name, {})[what] = {"median_ms": round(median, 2), "p95_ms": round(p95, 2)}
            print(f"{name:44} {what:20} {median:8.1f} {p95:8.1f} {mean:8.1f} {int(statistics.median(sizes[name])):10}")
    print(json.dumps(report))


async def run_task_overhead(args):
    with open(args.task) as f:
        task = json.load(f)
    params = StdioServerParameters(command=args.agentd, args=["--config", args.config, "mcp", "--local"])
    calls, processes = [], []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(11):
                start = time.perf_counter()
                result = await session.call_tool("run_task", task)
                if result.is_error:
                    raise SystemExit(f"run_task failed: {result.content}")
                calls.append((time.perf_counter() - start) * 1000)
    for _ in range(11):
        start = time.perf_counter()
        process = await anyio.run_process([args.agentd, "--config", args.config, "run", args.task], check=False)
        if process.returncode != 0:
            raise SystemExit(f"agentd run failed: {process.stderr.decode()}")
        processes.append((time.perf_counter() - start) * 1000)
    calls, processes = calls[1:], processes[1:]
    print(f"run_task (MCP call) median {statistics.median(calls):.1f} ms; agentd run (process) median "
          f"{statistics.median(processes):.1f} ms; over {len(calls)} runs each of {args.task}")


anyio.run(main)
