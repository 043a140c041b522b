"""msg_exp.py's measure over --remote-debugging-pipe (the transport LocalChromium uses): one
Runtime.evaluate carrying N bytes against the same N bytes in 8 messages sent at once. Its own
small client over the pipe (fds 3 and 4), with threads; no websockets needed.

Results: docs/measurements/restore-handover-2026-12-02/experiments.txt.
Run: python3 crates/lab/experiments/restore-handover-2026-12-02/pipe_exp.py
"""
import os, subprocess, json, time, tempfile, shutil, statistics, sys, threading
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab

FLAGS = ["--headless", "--no-sandbox", "--remote-debugging-pipe", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-dev-shm-usage"]
d = tempfile.mkdtemp()
r_in, w_in = os.pipe()   # we write -> chrome fd3
r_out, w_out = os.pipe() # chrome fd4 -> we read
def pre():
    a, b = os.dup(r_in), os.dup(w_out); os.dup2(a, 3); os.dup2(b, 4); os.set_inheritable(3, True); os.set_inheritable(4, True)
p = subprocess.Popen([lab.CHROMIUM, *FLAGS, f"--user-data-dir={d}", "about:blank"], preexec_fn=pre, pass_fds=(), close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(r_in); os.close(w_out)
rf = os.fdopen(r_out, "rb", buffering=0)
buf = b""; waiting = {}; n = 0
lock = threading.Lock()
def reader():
    global buf
    while True:
        chunk = rf.read(1 << 20)
        if not chunk: return
        buf += chunk
        while b"\0" in buf:
            m, buf = buf.split(b"\0", 1)
            msg = json.loads(m)
            if "id" in msg and msg["id"] in waiting:
                waiting[msg["id"]][1] = msg; waiting[msg["id"]][0].set()
threading.Thread(target=reader, daemon=True).start()
def send_many(msgs):
    global n
    evs = []
    for m in msgs:
        n += 1
        e = [threading.Event(), None]; waiting[n] = e; evs.append(e)
        m = dict(m); m["id"] = n
        os.write(w_in, (json.dumps(m) + "\0").encode())
    for e in evs: e[0].wait(30)
    return [e[1] for e in evs]
time.sleep(1.5)
t = send_many([{"method": "Target.getTargets", "params": {}}])[0]
page = next(x for x in t["result"]["targetInfos"] if x["type"] == "page")
s = send_many([{"method": "Target.attachToTarget", "params": {"targetId": page["targetId"], "flatten": True}}])[0]["result"]["sessionId"]
for size in [100_000, 400_000, 1_200_000]:
    for chunks in [1, 8]:
        xs = []
        for _ in range(5):
            part = "7" * (size // chunks)
            msgs = [{"sessionId": s, "method": "Runtime.evaluate", "params": {"expression": f"(globalThis.b = (globalThis.b || '') + '{part}').length", "returnByValue": True}} for _ in range(chunks)]
            t0 = time.perf_counter(); send_many(msgs); xs.append(lab.ms_since(t0))
        print(f"pipe: evaluate {size:>9} bytes in {chunks} message(s): median {statistics.median(xs):6.1f} ms {[round(x,1) for x in xs]}")
p.kill(); shutil.rmtree(d, ignore_errors=True)
