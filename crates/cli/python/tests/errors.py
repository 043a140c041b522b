"""How a run ends besides completing: the task's own exception back, gave_up after more
deaths than max_relaunches, invalid_option before anything is launched."""

import json
import os

import outlive

provider = outlive.solari(os.environ["SOLARI_BASE_URL"], api_key=os.environ["SOLARI_API_KEY"])


class NotABankDay(Exception):
    pass


mine = NotABankDay("closed")
events = []


def fails(page, ctx):
    page.goto("data:text/html,<title>t</title>")
    raise mine


try:
    outlive.run(provider, fails, on_event=events.append)
    raise AssertionError("the task's exception was swallowed")
except NotABankDay as e:
    assert e is mine
assert [e["outcome"] for e in events] == ["failed"], events

for options, option in [
    ({"checkpoint_every": -1}, "checkpoint_every"),
    ({"max_relaunches": "5"}, "max_relaunches"),
    ({"bogus": 1}, "bogus"),
    ({"checkpoint_every": 0}, "checkpoint_every"),  # refused by the engine, before a launch
]:
    seen = []
    try:
        outlive.run(provider, lambda page, ctx: None, on_event=seen.append, **options)
        raise AssertionError(f"{options} was accepted")
    except outlive.OutliveError as e:
        assert (e.code, e.option) == ("invalid_option", option), (options, e.code, e.option, e)
    assert len(seen) == 1 and seen[0]["attempts"] == 0, seen

attempts = []


def waits(page, ctx):
    attempts.append(ctx.attempt)
    while True:
        page.goto("data:text/html,<title>waiting for the session to end</title>")
        page.wait_for_timeout(300)


try:
    outlive.run(provider, waits, max_relaunches=1)
    raise AssertionError("a task that keeps dying did not give up")
except outlive.OutliveError as e:
    assert e.code == "gave_up", e
    assert e.event["outcome"] == "gave_up", e.event
assert attempts == [1, 2], attempts
print(json.dumps({"test": "errors.py", "ok": True}))
