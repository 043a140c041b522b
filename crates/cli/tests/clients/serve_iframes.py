"""A client of `outlive serve` that opens tab after tab, each on a page whose cross-site iframe
answers a little later than the last. One of them starts its iframe as outlive's own
connection sets itself up on the tab: that tab must load like the others.

Env: OUTLIVE_CDP_URL, RESULT_DIR. Writes RESULT_DIR/iframes.json: per tab, the widget's
delay (ms) and whether the page loaded within 10 s.
"""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from playwright.sync_api import Error, sync_playwright

env = os.environ
RESULT = Path(env["RESULT_DIR"]) / "iframes.json"
# Widget delays swept, in ms: wider than the time outlive takes to attach to a new tab.
DELAYS = range(0, 150, 5)


class Site(BaseHTTPRequestHandler):
    """/app?d=N embeds the widget from the other site; /w?d=N answers after N ms."""

    def do_GET(self):
        path, _, query = self.path.partition("?")
        delay = int(query.removeprefix("d=") or 0)
        if path == "/app":
            body = f'<iframe src="http://localhost:{PORT}/w?d={delay}"></iframe>'
        else:
            time.sleep(delay / 1000)
            body = "<p>widget</p>"
        data = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
PORT = server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()

tabs = []
with sync_playwright() as pw:
    browser = pw.chromium.connect_over_cdp(env["OUTLIVE_CDP_URL"])
    context = browser.contexts[0]
    for delay in DELAYS:
        page = context.new_page()
        try:
            page.goto(f"http://127.0.0.1:{PORT}/app?d={delay}", timeout=10_000)
            loaded = True
        except Error:
            loaded = False
        tabs.append({"delayMs": delay, "loaded": loaded})
        page.close()
server.shutdown()
RESULT.write_text(json.dumps(tabs))
