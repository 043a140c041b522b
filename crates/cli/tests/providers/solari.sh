#!/bin/sh
# A provider in a few lines of shell, for `--provider-cmd`: sessions from a Solari-compatible
# API at $PROVIDER_URL (key in $SOLARI_API_KEY), asking each for a lifetime of
# $LIFETIME_MS when set (and stating it). Launch prints {"cdpUrl", "id", "lifetimeMs"?};
# `release ID` deletes the session. Python does the HTTP: curl is not everywhere.
set -eu
exec python3 - "$@" <<'PY'
import json, os, sys, urllib.request
url, key, life = os.environ["PROVIDER_URL"], os.environ["SOLARI_API_KEY"], os.environ.get("LIFETIME_MS")
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=body and json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()
if sys.argv[1:2] == ["release"]:
    call("DELETE", "/sessions/" + sys.argv[2])
else:
    meta = {"chaos.lifetimeMs": int(life)} if life else {}
    s = json.loads(call("POST", "/sessions", {"userMetadata": meta}))
    out = {"cdpUrl": s["cdpEndpoint"], "id": s["id"]}
    if life:
        out["lifetimeMs"] = int(life)
    print(json.dumps(out))
PY
