"""Unit tests for `toolbus.scheduling`: group planning and the barrier state machine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbus.scheduling import BarrierSchedule, Group, plan_groups

R, W = True, False


def _spans(groups: list[Group]) -> list[tuple[int, int, bool]]:
    return [(g.start, g.stop, g.read_only) for g in groups]


def _transitions(s: BarrierSchedule) -> list[tuple[str, int]]:
    return [(kind, g.index) for kind, g in s.transitions]


# -- plan_groups -----------------------------------------------------------------------


def test_plan_groups_empty() -> None:
    assert plan_groups([]) == []


def test_plan_groups_all_reads_is_one_group() -> None:
    groups = plan_groups([R, R, R, R])
    assert groups == [Group(index=0, start=0, stop=4, read_only=True)]
    assert groups[0].size == 4


def test_plan_groups_all_writes_each_alone() -> None:
    groups = plan_groups([W, W, W])
    assert groups == [
        Group(0, 0, 1, False),
        Group(1, 1, 2, False),
        Group(2, 2, 3, False),
    ]
    assert [g.size for g in groups] == [1, 1, 1]


def test_plan_groups_mixed() -> None:
    groups = plan_groups([R, R, W, R, W, W, R, R])
    assert _spans(groups) == [
        (0, 2, True),
        (2, 3, False),
        (3, 4, True),
        (4, 5, False),
        (5, 6, False),
        (6, 8, True),
    ]
    assert [g.index for g in groups] == [0, 1, 2, 3, 4, 5]


def test_plan_groups_write_first_and_last() -> None:
    assert _spans(plan_groups([W, R, R])) == [(0, 1, False), (1, 3, True)]
    assert _spans(plan_groups([R, R, W])) == [(0, 2, True), (2, 3, False)]
    assert _spans(plan_groups([W])) == [(0, 1, False)]
    assert _spans(plan_groups([R])) == [(0, 1, True)]


def test_plan_groups_accepts_any_sequence() -> None:
    assert _spans(plan_groups((R, W))) == [(0, 1, True), (1, 2, False)]


# -- BarrierSchedule: basics -----------------------------------------------------------


def test_empty_batch_completes_on_open() -> None:
    s = BarrierSchedule([])
    assert not s.complete
    assert s.current is None
    assert s.open() == []
    assert s.complete
    assert s.current is None
    assert s.transitions == []
    assert s.groups == []


def test_open_twice_raises() -> None:
    s = BarrierSchedule([R])
    assert s.open() == [0]
    with pytest.raises(RuntimeError, match="already opened"):
        s.open()


def test_current_is_none_before_open() -> None:
    s = BarrierSchedule([R, W])
    assert s.current is None
    assert not s.complete
    assert not s.is_open(0)


def test_all_reads_one_group_in_parallel() -> None:
    s = BarrierSchedule([R, R, R])
    assert s.open() == [0, 1, 2]
    assert s.current == Group(0, 0, 3, True)
    assert all(s.is_open(i) for i in range(3))
    assert s.finish(1) == []
    assert s.finish(0) == []
    assert not s.complete
    assert s.finish(2) == []
    assert s.complete
    assert s.current is None
    assert _transitions(s) == [("open", 0), ("close", 0)]


def test_all_writes_strictly_sequential() -> None:
    s = BarrierSchedule([W, W, W])
    assert s.open() == [0]
    assert s.is_open(0)
    assert not s.is_open(1)
    assert s.finish(0) == [1]
    assert s.current == Group(1, 1, 2, False)
    assert s.finish(1) == [2]
    assert not s.complete
    assert s.finish(2) == []
    assert s.complete
    assert _transitions(s) == [
        ("open", 0),
        ("close", 0),
        ("open", 1),
        ("close", 1),
        ("open", 2),
        ("close", 2),
    ]


def test_mixed_batch_runs_group_by_group() -> None:
    s = BarrierSchedule([R, R, W, R, W, W, R, R])
    assert s.open() == [0, 1]
    assert s.finish(0) == []
    assert s.finish(1) == [2]
    assert s.finish(2) == [3]
    assert s.finish(3) == [4]
    assert s.finish(4) == [5]
    assert s.finish(5) == [6, 7]
    assert s.finish(7) == []
    assert s.current == Group(5, 6, 8, True)
    assert s.finish(6) == []
    assert s.complete
    assert _transitions(s) == [(kind, i) for i in range(6) for kind in ("open", "close")]


def test_write_first() -> None:
    s = BarrierSchedule([W, R, R])
    assert s.open() == [0]
    assert s.finish(0) == [1, 2]
    assert s.finish(2) == []
    assert s.finish(1) == []
    assert s.complete


def test_write_last() -> None:
    s = BarrierSchedule([R, R, W])
    assert s.open() == [0, 1]
    assert s.finish(1) == []
    assert s.finish(0) == [2]
    assert s.finish(2) == []
    assert s.complete


def test_out_of_order_finish_within_group() -> None:
    s = BarrierSchedule([R, R, R, R, W])
    assert s.open() == [0, 1, 2, 3]
    assert s.finish(3) == []
    assert s.finish(1) == []
    assert s.finish(2) == []
    assert s.current is not None
    assert s.current.index == 0
    assert s.finish(0) == [4]
    assert s.current == Group(1, 4, 5, False)


def test_group_of() -> None:
    s = BarrierSchedule([R, R, W, R])
    assert s.group_of(0) == Group(0, 0, 2, True)
    assert s.group_of(1) is s.group_of(0)
    assert s.group_of(2) == Group(1, 2, 3, False)
    assert s.group_of(3) == Group(2, 3, 4, True)


def test_double_finish_is_noop() -> None:
    s = BarrierSchedule([R, R, W])
    s.open()
    assert s.finish(0) == []
    assert s.finish(0) == []  # would wrongly close the group if counted twice
    assert s.current is not None
    assert s.current.index == 0
    assert s.finish(1) == [2]
    assert s.finish(1) == []
    assert s.finish(2) == []
    assert s.finish(2) == []
    assert s.complete
    assert _transitions(s) == [("open", 0), ("close", 0), ("open", 1), ("close", 1)]


# -- pre-finished calls ----------------------------------------------------------------


def test_prefinished_call_of_later_group_is_not_started() -> None:
    s = BarrierSchedule([R, W, R, R])
    assert s.open() == [0]
    # Call 3 is rejected up front: its group is not open, nothing becomes eligible.
    assert s.finish(3) == []
    assert s.current is not None
    assert s.current.index == 0
    assert s.finish(0) == [1]
    # Group 2 opens with only the call that is still to run.
    assert s.finish(1) == [2]
    assert s.finish(2) == []
    assert s.complete


def test_fully_prefinished_groups_are_skipped() -> None:
    s = BarrierSchedule([R, W, R, R, W, R])
    assert s.open() == [0]
    # Reject the whole of groups 1 and 2 (calls 1, 2, 3) before they open.
    for i in (1, 2, 3):
        assert s.finish(i) == []
    assert s.finish(0) == [4]
    assert s.current == Group(3, 4, 5, False)
    assert s.finish(4) == [5]
    assert s.finish(5) == []
    assert s.complete
    # Skipped groups never open, so they record no transitions.
    assert _transitions(s) == [
        ("open", 0),
        ("close", 0),
        ("open", 3),
        ("close", 3),
        ("open", 4),
        ("close", 4),
    ]


def test_prefinished_before_open() -> None:
    s = BarrierSchedule([W, R, R])
    assert s.finish(0) == []
    assert s.finish(2) == []
    assert s.open() == [1]
    assert s.current == Group(1, 1, 3, True)
    assert s.finish(1) == []
    assert s.complete
    assert _transitions(s) == [("open", 1), ("close", 1)]


def test_everything_prefinished_completes_on_open() -> None:
    s = BarrierSchedule([R, W, R])
    for i in range(3):
        assert s.finish(i) == []
    assert s.open() == []
    assert s.complete
    assert s.transitions == []


def test_last_group_prefinished_completes_when_previous_closes() -> None:
    s = BarrierSchedule([R, R, W])
    assert s.open() == [0, 1]
    assert s.finish(2) == []
    assert s.finish(0) == []
    assert not s.complete
    assert s.finish(1) == []
    assert s.complete
    assert _transitions(s) == [("open", 0), ("close", 0)]


def test_prefinish_within_open_group_counts_toward_closing() -> None:
    s = BarrierSchedule([R, R, W])
    assert s.open() == [0, 1]
    # Call 1 cancelled while its group is open (it may never have started).
    assert s.finish(1) == []
    assert s.finish(0) == [2]


def test_transitions_recorded_in_order_and_drainable() -> None:
    s = BarrierSchedule([W, R])
    s.open()
    assert _transitions(s) == [("open", 0)]
    s.transitions.clear()  # the owner drains the list
    s.finish(0)
    assert _transitions(s) == [("close", 0), ("open", 1)]
    s.transitions.clear()
    s.finish(1)
    assert _transitions(s) == [("close", 1)]
    assert all(isinstance(g, Group) for _, g in s.transitions)


# -- property: the barrier invariant under random completion orders --------------------


@st.composite
def _runs(draw: st.DrawFn) -> tuple[list[bool], list[int], int]:
    read_only = draw(st.lists(st.booleans(), max_size=12))
    n = len(read_only)
    # A stream of choices that drives the simulation; each choice is reduced
    # modulo the number of options available at that point.
    choices = draw(st.lists(st.integers(min_value=0, max_value=10_000), min_size=2 * n + 1))
    prefinish_before_open = draw(st.integers(min_value=0, max_value=n))
    return read_only, choices, prefinish_before_open


@settings(max_examples=200, deadline=None)
@given(_runs())
def test_barrier_invariant_holds_for_any_completion_order(
    run: tuple[list[bool], list[int], int],
) -> None:
    read_only, choices, prefinish_before_open = run
    n = len(read_only)
    s = BarrierSchedule(read_only)
    eligible: set[int] = set()  # calls the schedule has let start
    finished: set[int] = set()
    prefinished: set[int] = set()
    stream = iter(choices)

    def pick(options: list[int]) -> int:
        return options[next(stream, 0) % len(options)]

    def admit(calls: list[int]) -> None:
        for i in calls:
            assert i not in eligible, f"call {i} became eligible twice"
            assert i not in finished, f"finished call {i} became eligible"
            # Every call before a mutating call must have finished first ...
            for m in range(i):
                if not read_only[m]:
                    assert m in finished, f"call {i} eligible before mutating call {m} finished"
            # ... and a mutating call waits for every earlier call.
            if not read_only[i]:
                assert all(j in finished for j in range(i)), f"mutating {i} started early"
            eligible.add(i)
        # Calls admitted together belong to one group: the open one.
        if calls:
            assert s.current is not None
            assert {s.group_of(i).index for i in calls} == {s.current.index}
        # While a mutating call runs, nothing else runs.
        running = eligible - finished
        if any(not read_only[i] for i in running):
            assert len(running) == 1

    def finish(i: int) -> None:
        finished.add(i)
        admit(s.finish(i))

    # Some calls may be rejected before the schedule even opens.
    for _ in range(prefinish_before_open):
        options = [i for i in range(n) if i not in finished]
        if not options:
            break
        i = pick(options)
        prefinished.add(i)
        finish(i)

    admit(s.open())

    steps = 0
    while len(finished) < n:
        steps += 1
        assert steps <= n, "schedule made no progress"
        started = sorted(eligible - finished)
        not_started = [i for i in range(n) if i not in eligible and i not in finished]
        moves = [("finish", i) for i in started] + [("prefinish", i) for i in not_started]
        kind, i = moves[next(stream, 0) % len(moves)]
        if kind == "prefinish":
            prefinished.add(i)
        finish(i)

    assert s.complete
    assert s.current is None
    # Every call that was not pre-finished was started exactly once.
    assert eligible | prefinished == set(range(n))
    # Further finishes are no-ops.
    for i in range(n):
        assert s.finish(i) == []

    # Transitions alternate open/close of the same group, in increasing order,
    # and every group containing a started call was opened.
    kinds = [k for k, _ in s.transitions]
    assert kinds == ["open", "close"] * (len(kinds) // 2)
    opened = [g.index for k, g in s.transitions if k == "open"]
    closed = [g.index for k, g in s.transitions if k == "close"]
    assert opened == closed
    assert opened == sorted(set(opened))
    assert set(opened) == {s.group_of(i).index for i in eligible}
