#!/usr/bin/env python3
"""The peer of `benches/step.rs`: the OpenAI computer-use sample's Playwright browser computer (its `click`
is `page.mouse.click(x, y)`, its `screenshot` is `page.screenshot(full_page=False)` base64-encoded), with
Debian's Chromium (Playwright's own download cannot run here), on the same page at 1280x800: a click plus a
PNG screenshot per step, median and p95 over 100 steps after 5 warm-up ones, and launch to first screenshot.

    python3 -m venv /tmp/pw && /tmp/pw/bin/pip install playwright
    /tmp/pw/bin/python providers/browser/benches/playwright_step.py
"""
import base64
import http.server
import os
import shutil
import statistics
import threading
import time

from playwright.sync_api import sync_playwright

PAGE = b"""<!doctype html><title>bench</title><body style="margin:0;font:16px sans-serif">
<p style="position:absolute;left:20px;top:20px">A simple page: a heading, some text and a button.</p>
<button id="b" style="position:absolute;left:600px;top:300px;width:120px;height:40px">Press</button>
<div id="s" style="position:absolute;left:1000px;top:20px;width:100px;height:60px;background:#00f"></div>
<script>let n=0;document.getElementById('b').onclick=()=>{document.getElementById('s').style.background=['#f00','#0a0','#00f'][n++%3]};</script>
</body>"""


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, len(values) * p // 100)] * 1000


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    executable = os.environ.get("AGENTD_TEST_CHROMIUM") or shutil.which("chromium")
    with sync_playwright() as pw:
        starts = []
        for _ in range(5):
            t = time.perf_counter()
            browser = pw.chromium.launch(executable_path=executable, headless=True, chromium_sandbox=False)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            base64.b64encode(page.screenshot(full_page=False)).decode()
            starts.append(time.perf_counter() - t)
            browser.close()
        browser = pw.chromium.launch(executable_path=executable, headless=True, chromium_sandbox=False)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(url)
        steps = []
        for i in range(105):
            t = time.perf_counter()
            page.mouse.click(660, 320)
            base64.b64encode(page.screenshot(full_page=False)).decode()
            if i >= 5:
                steps.append(time.perf_counter() - t)
        browser.close()
    print(
        f"playwright {__import__('importlib.metadata').metadata.version('playwright')}: step (click + PNG screenshot, "
        f"1280x800) median {pct(steps, 50):.1f} ms, p95 {pct(steps, 95):.1f} ms over {len(steps)}; launch to first "
        f"screenshot median {statistics.median(starts) * 1000:.0f} ms (min {min(starts) * 1000:.0f}, max "
        f"{max(starts) * 1000:.0f}) over {len(starts)}"
    )


if __name__ == "__main__":
    main()
