"""One Runtime.evaluate carrying N bytes, against the same N bytes in 8 messages sent at once,
over the browser websocket: 5 samples per size, medians in ms.

Results: docs/measurements/restore-handover-2026-12-02/experiments.txt.
Run: target/clients/venv/bin/python crates/lab/experiments/restore-handover-2026-12-02/msg_exp.py
"""
import asyncio, json, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab


async def main():
    async with lab.browser(lab.LOCAL_CHROMIUM_FLAGS) as c:
        s = await c.first_page()
        for size in [1000, 100_000, 400_000, 1_200_000]:
            for chunks in [1, 8]:
                xs = []
                for _ in range(5):
                    part = "7" * (size // chunks)
                    msgs = [json.dumps({"id": 0, "sessionId": s, "method": "Runtime.evaluate", "params": {"expression": f"(globalThis.b = (globalThis.b || '') + '{part}').length", "returnByValue": True}}) for _ in range(chunks)]
                    await c.send("Runtime.evaluate", {"expression": "globalThis.b = ''"}, session=s)
                    t0 = time.perf_counter()
                    # Every message sent before any reply is awaited.
                    futs = [await c.post(lambda n, m=m: '{"id": %d,' % n + m[len('{"id": 0,'):]) for m in msgs]
                    await asyncio.gather(*futs)
                    xs.append(lab.ms_since(t0))
                print(f"evaluate {size:>9} bytes in {chunks} message(s): median {statistics.median(xs):6.1f} ms {[round(x,1) for x in xs]}")

if __name__ == "__main__":
    asyncio.run(main())
