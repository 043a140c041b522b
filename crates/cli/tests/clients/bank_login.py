"""Aurora Bank's sign-in for the Playwright clients: the password, then a TOTP code.

Env: BANK_URL, BANK_USER, BANK_PASSWORD, BANK_TOTP_SECRET.
"""

import base64
import hashlib
import hmac
import os
import struct
import time

env = os.environ
BANK = env["BANK_URL"].rstrip("/")


def totp(secret_b32: str) -> str:
    """RFC 6238: HMAC-SHA1, 30 s step, 6 digits."""
    secret = secret_b32.upper().replace(" ", "").rstrip("=")
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    mac = hmac.new(key, struct.pack(">Q", int(time.time()) // 30), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    return "%06d" % ((struct.unpack(">I", mac[offset : offset + 4])[0] & 0x7FFFFFFF) % 1_000_000)


def sign_in(page, before_code_sent=lambda: None) -> None:
    """Signs in on `page`; `before_code_sent` runs once the code is typed, before it is sent."""
    page.goto(f"{BANK}/login")
    page.fill("#username", env["BANK_USER"])
    page.fill("#password", env["BANK_PASSWORD"])
    page.click("#submit")
    page.wait_for_url("**/totp")
    page.fill("#code", totp(env["BANK_TOTP_SECRET"]))
    before_code_sent()
    page.click("#submit")
    page.wait_for_url("**/account*")
