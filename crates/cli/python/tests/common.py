"""What the Python package tests share: the bank's details, a TOTP, the checks of a run."""

import base64
import hashlib
import hmac
import json
import os
import struct
import time
import urllib.request

BANK = os.environ["BANK_URL"]
POLLS = int(os.environ.get("POLLS", "10"))
POLL_S = int(os.environ.get("POLL_MS", "500")) / 1000


def totp(secret_b32: str = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP") -> str:
    key = base64.b32decode(secret_b32)
    mac = hmac.new(key, struct.pack(">Q", int(time.time()) // 30), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    return "%06d" % ((struct.unpack(">I", mac[offset : offset + 4])[0] & 0x7FFFFFFF) % 1_000_000)


def counters() -> dict:
    with urllib.request.urlopen(f"{BANK}/__counters") as r:
        return json.load(r)


def check_bank_run(name: str, result, rows, entries, events, sign_ins_before: int) -> None:
    """At least two deaths, one sign-in, the value returned, attempt counting, rows kept."""
    c = counters()
    state = {"entries": entries, "events": events, "counters": c, "rows": len(rows)}
    checks = [
        (result is rows and len(rows) >= POLLS, "the task's value is the rows"),
        (len(events) == 1 and events[0]["outcome"] == "completed", "one wide event, completed"),
        (events and events[0]["relaunches"] >= 2, "at least two deaths"),
        (c["signIns"] - sign_ins_before == 1, "one sign-in"),
        ([e["attempt"] for e in entries] == list(range(1, len(entries) + 1)), "attempt counts"),
        (all(e["resumed"] and e["rows_at_entry"] > 0 for e in entries[1:]), "rows kept"),
        (all(int(b) > int(a) for a, b in zip(rows, rows[1:])), "one bank session"),
    ]
    for ok, what in checks:
        assert ok, f"{name}: {what}: {json.dumps(state)}"
    print(json.dumps({"test": name, "entries": len(entries), "relaunches": events[0]["relaunches"], "rows": len(rows)}))
