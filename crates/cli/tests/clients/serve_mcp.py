"""Playwright MCP on `outlive serve`, driven as an agent drives it: over MCP's stdio JSON-RPC,
with its own tools. Each round: navigate to Aurora Bank's login page, take a snapshot, type
into the username field by its ref, evaluate the field's value. After each round it asks for
a checkpoint and prints `checkpointed N`; the test kills the browser and answers `killed` on
stdin. A tool error is recorded with its round and the step is tried again once.

Env: OUTLIVE_CDP_URL, OUTLIVE_CONTROL_URL, BANK_URL, DEATHS, MCP_CLI, RESULT_DIR.
Writes RESULT_DIR/mcp.json.
"""

import json
import os
import re
import subprocess
from pathlib import Path

from serve_kept import checkpoint_and_die

env = os.environ
RESULT = Path(env["RESULT_DIR"]) / "mcp.json"
DEATHS = int(env["DEATHS"])
BANK = env["BANK_URL"].rstrip("/")


class Mcp:
    """An MCP client of one Playwright MCP server process, over its stdio."""

    def __init__(self):
        self.proc = subprocess.Popen(
            ["node", env["MCP_CLI"], "--cdp-endpoint", env["OUTLIVE_CDP_URL"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ids = 0
        self.call("initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                                 "clientInfo": {"name": "outlive-test", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: dict) -> dict:
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("the MCP server ended")
            message = json.loads(line)
            if message.get("id") == self.ids:
                if "error" in message:
                    raise SystemExit(f"{method}: {message['error']}")
                return message["result"]

    def tool(self, name: str, arguments: dict) -> tuple[bool, str]:
        """A tool's (ok, text)."""
        result = self.call("tools/call", {"name": name, "arguments": arguments})
        text = "\n".join(c.get("text", "") for c in result.get("content", []))
        return not result.get("isError"), text

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def step(mcp: Mcp, out: dict, n: int, name: str, arguments: dict) -> str:
    """A tool call, tried again once after an error (recorded)."""
    for _ in range(2):
        ok, text = mcp.tool(name, arguments)
        if ok:
            return text
        out["errors"].append({"round": n, "tool": name, "error": text.splitlines()[0] if text else ""})
    raise SystemExit(f"{name} failed twice: {text}")


def one_round(mcp: Mcp, out: dict, n: int) -> dict:
    step(mcp, out, n, "browser_navigate", {"url": f"{BANK}/login"})
    snapshot = step(mcp, out, n, "browser_snapshot", {})
    ref = re.search(r'textbox "Username" \[ref=(\w+)\]', snapshot)
    if not ref:
        raise SystemExit(f"no username field in the snapshot:\n{snapshot}")
    step(mcp, out, n, "browser_type", {"element": "Username", "target": ref.group(1), "text": f"round {n}"})
    value = step(mcp, out, n, "browser_evaluate",
                 {"function": "() => document.querySelector('#username').value"})
    return {"typed": f'"round {n}"' in value}


def main() -> None:
    out = {"rounds": [], "errors": []}
    mcp = Mcp()
    for n in range(DEATHS + 1):
        out["rounds"].append(one_round(mcp, out, n))
        if n == DEATHS:
            break
        checkpoint_and_die(n)
    ok, tabs = mcp.tool("browser_tabs", {"action": "list"})
    out["tabs"] = tabs if ok else None
    mcp.close()
    RESULT.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
