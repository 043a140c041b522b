"""How late a page's own localStorage write is reported by DevTools' DOMStorage events: 20
writes, each timed, then the next evaluate. Which came first on the connection, the event or
the replies? Raw CDP, Debian Chromium; the client and page of domstorage_cases.py.

Results: docs/measurements/README.md ("A new document warmed up while idle").
Run: target/clients/venv/bin/python crates/lab/experiments/warm-up-2026-12-02/domstorage_lag.py
"""
import asyncio, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cdp_lab as lab
from domstorage_cases import log, page, watched_page


async def main():
    srv, a = lab.serve(page)
    try:
        async with watched_page(a) as (c, s):
            for i in range(20):
                log.clear()
                t0 = time.perf_counter()
                await c.value(f"localStorage.setItem('a', '{i}'); 1", s)
                t1 = time.perf_counter()
                await c.value("1", s)
                t2 = time.perf_counter()
                kinds = [l[0] for l in log if l[0] in ("event", "reply")]
                while not any(l[0]=="event" for l in log): await asyncio.sleep(0.001)
                t3 = time.perf_counter()
                print(i, kinds, f"set {1e3*(t1-t0):.2f} ms, next {1e3*(t2-t1):.2f}, event by {1e3*(t3-t0):.2f}")
    finally:
        srv.shutdown()

if __name__ == "__main__":
    asyncio.run(main())
