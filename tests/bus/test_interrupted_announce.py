"""A Ctrl-C (`KeyboardInterrupt`) landing on the main thread as it announces
an event leaves no receiver's queue wedged (`Announcer.announce`): the queue
it took for delivery and was cut short before putting in line is put in line,
and that receiver gets this event and every later one; so do the receivers
it had not reached yet.

The interrupt is raised once, on the main thread, where the test chooses; no
sleeps, every wait bounded.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.bus.echo import echo_call, echo_registry
from tests.conftest import MakeExecutor
from toolbus import Executor, bus
from toolbus.bus._delivery import Announcer

WAIT = 20  # every wait's hang guard


def _cut(
    ex: Executor, monkeypatch: pytest.MonkeyPatch, where: str
) -> tuple[list[bus.Recorder], list[int]]:
    """Two recorders of `tool:finished` whose queues exist; the announcer cut
    once, on the main thread, at the first one's `where` ("claimed": as
    taking its queue for delivery returned; "schedule": as putting it in
    line is entered)."""
    recs = [bus.Recorder(bus.FINISHED, sender=ex) for _ in range(2)]
    assert ex.execute(echo_call(0)).ok  # (its plan and queue made)
    assert ex.drain_events(WAIT)
    announcer: Announcer = ex._announcer
    raised = [0]

    def once() -> bool:
        main = threading.current_thread() is threading.main_thread()
        if main and not raised[0]:
            raised[0] += 1
            return True
        return False

    if where == "claimed":
        plan = announcer._plans[bus.FINISHED]
        # The first recorder's (receivers of every sender another test left
        # are in the plan too).
        at = next(i for i, t in enumerate(plan.targets) if t[0].owner is recs[0]._sub)
        receiver, q, items, claim = plan.targets[at]

        def claimed(*args: Any) -> Any:
            got = claim(*args)
            if once():
                raise KeyboardInterrupt
            return got

        plan.targets[at] = (receiver, q, items, claimed)
    else:
        real: Callable[..., None] = Announcer._schedule

        def schedule(self: Announcer, q: Any) -> None:
            if once():
                raise KeyboardInterrupt
            real(self, q)

        monkeypatch.setattr(Announcer, "_schedule", schedule)
    return recs, raised


@pytest.mark.parametrize("where", ["claimed", "schedule"])
def test_a_ctrl_c_as_an_event_is_announced_leaves_no_receiver_without_events(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    ex = make_executor(echo_registry())
    recs, raised = _cut(ex, monkeypatch, where)
    first = recs[0].of(bus.FINISHED)[0]
    again = dataclasses.replace(first, call_id="again")
    with pytest.raises(KeyboardInterrupt):
        ex._announcer.announce(bus.FINISHED, again)
    assert raised[0] == 1
    assert ex.execute(echo_call(1)).ok
    assert ex.drain_events(WAIT), "the receiver's queue was left wedged"
    for rec in recs:  # (the second was not reached yet when the first was cut)
        got = [e.call_id for e in rec.of(bus.FINISHED)]
        assert got == ["c0", "again", "c1"], got
        rec.close()
