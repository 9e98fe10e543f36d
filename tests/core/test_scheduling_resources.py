"""Unit tests for effect-aware scheduling: `resource_keys`, `call_resources`,
`plan_dependencies` and `DependencySchedule` (pure: no threads, no executor)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbus import Injected, Tool, ToolRegistry, tool
from toolbus.scheduling import (
    FULL_BARRIER,
    BarrierSchedule,
    DependencySchedule,
    Resources,
    Schedule,
    call_resources,
    make_schedule,
    plan_dependencies,
)

R, W = True, False
FB: Resources = FULL_BARRIER


def _kinds(s: Schedule) -> list[tuple[str, int]]:
    out = [(kind, g.index) for kind, g in s.transitions]
    s.transitions.clear()
    return out


# -- the conflict rule, written out naively: the oracle of the property tests ----------


def _touches_all(read_only: bool, res: Resources) -> bool:
    return res is None or res == FB


def _writes(read_only: bool, res: Resources) -> bool:
    return not read_only or res == FB  # an unreadable key: a full barrier, even for a read


def conflicts(read_only: Sequence[bool], resources: Sequence[Resources], j: int, i: int) -> bool:
    """Whether calls j and i touch a common resource and one of them writes it."""
    if not (_writes(read_only[j], resources[j]) or _writes(read_only[i], resources[i])):
        return False
    if _touches_all(read_only[j], resources[j]) or _touches_all(read_only[i], resources[i]):
        return True
    a, b = resources[j], resources[i]
    assert isinstance(a, tuple) and isinstance(b, tuple)
    return bool(set(a) & set(b))


def must_precede(read_only: Sequence[bool], resources: Sequence[Resources]) -> list[set[int]]:
    """For each call, every earlier call it must wait for: the transitive closure
    of the conflicts."""
    n = len(read_only)
    before: list[set[int]] = [set() for _ in range(n)]
    for i in range(n):
        for j in range(i):
            if conflicts(read_only, resources, j, i):
                before[i] |= before[j] | {j}
    return before


# -- call_resources --------------------------------------------------------------------


def test_call_resources_without_keys_is_none() -> None:
    assert call_resources((), {"path": "a"}) is None


def test_call_resources_from_a_dict_and_from_json_text_agree() -> None:
    assert call_resources(("path",), {"path": "a", "x": 1}) == (b'"a"',)
    assert call_resources(("path",), '{"x": 1, "path": "a"}') == (b'"a"',)


def test_call_resources_compares_values_literally() -> None:
    one, text = call_resources(("id",), {"id": 1}), call_resources(("id",), {"id": "1"})
    assert one != text
    assert call_resources(("id",), {"id": 1.0}) != one
    # Objects compare by content, whatever the order of their keys.
    assert call_resources(("q",), {"q": {"a": 1, "b": 2}}) == call_resources(
        ("q",), '{"q": {"b": 2, "a": 1}}'
    )
    big = 2**80  # beyond orjson's integers: still exact
    assert call_resources(("n",), f'{{"n": {big}}}') == (str(big).encode(),)


def test_call_resources_one_resource_per_key_value() -> None:
    assert call_resources(("src", "dst"), {"src": "a", "dst": "b"}) == (b'"a"', b'"b"')
    assert call_resources(("src", "dst"), {"src": "a", "dst": "a"}) == (b'"a"',)


@pytest.mark.parametrize(
    "arguments",
    [
        {"other": "a"},  # the key is missing
        "",  # no arguments at all
        '{"path": ',  # unparseable
        '["a"]',  # not an object
        "null",
        {"path": object()},  # not JSON
        "\ud800",  # not UTF-8
    ],
)
def test_call_resources_unreadable_keys_are_a_full_barrier(arguments: Any) -> None:
    assert call_resources(("path",), arguments) == FB


def test_call_resources_null_is_a_value() -> None:
    assert call_resources(("path",), {"path": None}) == (b"null",)


# -- the option on tools ---------------------------------------------------------------


def test_resource_keys_on_every_way_to_make_a_tool() -> None:
    registry = ToolRegistry()

    @registry.tool(resource_keys=["path"])
    def write(path: str, data: str) -> None: ...

    @tool(read_only=True, resource_keys=("path", "path"))
    def read(path: str) -> str:
        return path

    class Put(Tool):
        name = "put"
        parameters = {"type": "object", "properties": {"key": {"type": "string"}}}  # noqa: RUF012
        resource_keys = ("key",)

        def run(self, params: dict[str, Any]) -> None: ...

    class Loose(Tool):  # no schema: it reads its arguments itself
        name = "loose"
        resource_keys = ("anything",)

        def run(self, params: dict[str, Any]) -> None: ...

    assert write.resource_keys == ("path",)
    assert read.resource_keys == ("path",)
    assert Put().resource_keys == ("key",)
    assert Loose().resource_keys == ("anything",)
    assert tool(name="echo")(lambda x: x).resource_keys == ()


def _fn(path: str, api_key: Annotated[str, Injected] = "") -> None: ...


def _text(text: str) -> None: ...


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"resource_keys": "path"}, "resource_keys must be a tuple or list"),
        ({"resource_keys": ("",)}, "resource_keys must be non-empty strings"),
        ({"resource_keys": (1,)}, "resource_keys must be non-empty strings"),
        ({"resource_keys": ("nope",)}, "resource_keys names 'nope', which is not one of"),
        ({"resource_keys": ("api_key",)}, "resource_keys names 'api_key', an injected"),
    ],
)
def test_resource_keys_checked_at_registration(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ToolRegistry().tool(**options)(_fn)


def test_resource_keys_refused_on_a_custom_tool_and_a_schema_without_it() -> None:
    with pytest.raises(ValueError, match="resource_keys needs named parameters"):
        tool(type="custom", resource_keys=("text",))(_text)

    class Put(Tool):
        name = "put"
        parameters = {"type": "object", "properties": {"key": {"type": "string"}}}  # noqa: RUF012
        resource_keys = ("path",)

        def run(self, params: dict[str, Any]) -> None: ...

    with pytest.raises(ValueError, match="tool 'put': resource_keys names 'path'"):
        Put()


# -- plan_dependencies -------------------------------------------------------------------


def test_plan_dependencies_without_keys_is_the_barrier_order() -> None:
    assert plan_dependencies([R, R, W, R, W], [None] * 5) == [[], [], [0, 1], [2], [3]]


def test_plan_dependencies_keyed() -> None:
    a, b = ("a",), ("b",)
    # write a, write b, read a, write a, read b
    assert plan_dependencies([W, W, R, W, R], [a, b, a, a, b]) == [[], [], [0], [0, 2], [1]]


def test_plan_dependencies_joins_many_to_many() -> None:
    # Three reads of anything, then two keyed writes: each write waits on one
    # join of the reads, not on each read.
    deps = plan_dependencies([R, R, R, W, W], [None, None, None, ("a",), ("b",)])
    assert deps == [[], [], [], [5], [5], [0, 1, 2]]


def test_plan_dependencies_refuses_mismatched_and_empty_input() -> None:
    with pytest.raises(ValueError, match="one entry per call"):
        plan_dependencies([R], [])
    with pytest.raises(ValueError, match="at least one resource"):
        plan_dependencies([W], [()])


# -- DependencySchedule: the cases of the spec -----------------------------------------


def test_writes_to_distinct_resources_run_together() -> None:
    s = DependencySchedule([W, W, W], [("a",), ("b",), ("c",)])
    assert s.open() == [0, 1, 2]
    assert _kinds(s) == [("open", 0), ("open", 1), ("open", 2)]
    assert s.finish(1) == []
    assert _kinds(s) == [("close", 1)]


def test_writes_to_one_resource_run_in_order() -> None:
    s = DependencySchedule([W, W, W], [("a",), ("b",), ("a",)])
    assert s.open() == [0, 1]
    assert s.finish(1) == []
    assert s.finish(0) == [2]
    assert s.finish(2) == []
    assert s.complete


def test_a_read_waits_only_for_an_earlier_write_of_its_resource() -> None:
    # write a, read b, read a, write b
    s = DependencySchedule([W, R, R, W], [("a",), ("b",), ("a",), ("b",)])
    assert s.open() == [0, 1]  # read b does not wait for write a
    assert s.finish(1) == [3]  # write b waits only for the read of b before it
    assert s.finish(0) == [2]


def test_a_read_without_keys_waits_for_every_earlier_write() -> None:
    s = DependencySchedule([W, W, R, R], [("a",), ("b",), None, ("c",)])
    assert s.open() == [0, 1, 3]
    assert s.finish(0) == []
    assert s.finish(1) == [2]


def test_a_keyed_write_waits_for_an_earlier_read_of_anything() -> None:
    s = DependencySchedule([R, W, W], [None, ("a",), ("b",)])
    assert s.open() == [0]
    assert s.finish(0) == [1, 2]


@pytest.mark.parametrize("read_only", [R, W])
def test_a_missing_key_is_a_full_barrier(read_only: bool) -> None:
    s = DependencySchedule([W, R, read_only, W, R], [("a",), ("b",), FB, ("c",), ("d",)])
    assert s.open() == [0, 1]
    assert s.finish(0) == []
    assert s.finish(1) == [2]
    assert s.finish(2) == [3, 4]


def test_a_mutating_call_without_keys_is_a_full_barrier() -> None:
    s = DependencySchedule([W, W, W], [("a",), None, ("b",)])
    assert s.open() == [0]
    assert s.finish(0) == [1]
    assert s.finish(1) == [2]


def test_a_call_ended_early_still_holds_back_what_waits_on_it() -> None:
    # write a, read a, write a: the read is cancelled before it was due; the
    # second write still waits for the first.
    s = DependencySchedule([W, R, W], [("a",), ("a",), ("a",)])
    assert s.open() == [0]
    assert s.finish(1) == []
    assert s.finish(0) == [2]
    assert _kinds(s) == [("open", 0), ("close", 0), ("open", 2)]  # group 1 never opened


def test_groups_open_and_close_as_their_calls_go() -> None:
    # write a | read a, read b | write b
    s = DependencySchedule([W, R, R, W], [("a",), ("a",), ("b",), ("b",)])
    assert s.open() == [0, 2]
    assert _kinds(s) == [("open", 0), ("open", 1)]
    assert s.is_open(1) and s.current is not None and s.current.index == 0
    assert s.finish(2) == [3]
    assert _kinds(s) == [("open", 2)]
    assert s.finish(0) == [1]
    assert _kinds(s) == [("close", 0)]  # group 1 is open already
    assert s.finish(1) == []
    assert s.finish(3) == []
    assert _kinds(s) == [("close", 1), ("close", 2)]
    assert s.complete and s.current is None


def test_finished_before_open() -> None:
    s = DependencySchedule([W, W, R], [("a",), ("a",), ("a",)])
    assert s.finish(0) == []
    assert not s.complete
    assert s.open() == [1]
    with pytest.raises(RuntimeError, match="already opened"):
        s.open()


def test_make_schedule_keeps_the_barrier_schedule_without_keys() -> None:
    assert type(make_schedule([R, W])) is BarrierSchedule
    assert type(make_schedule([R, W], [None, None])) is BarrierSchedule
    assert type(make_schedule([R, W], [None, ("a",)])) is DependencySchedule
    assert type(make_schedule([R, W], [None, FB])) is DependencySchedule


# -- waiters_of ------------------------------------------------------------------------


def test_waiters_of() -> None:
    # write a, write b, read a, write a, read c, read anything
    s = DependencySchedule([W, W, R, W, R, R], [("a",), ("b",), ("a",), ("a",), ("c",), None])
    assert s.waiters_of(0) == [2, 3, 5]
    assert s.waiters_of(1) == [5]
    assert s.waiters_of(2) == [3, 5]
    assert s.waiters_of(4) == []
    assert s.waiters_of(5) == []
    b = BarrierSchedule([R, R, W, R])
    assert [b.waiters_of(i) for i in range(4)] == [[2, 3], [2, 3], [3], []]


# -- properties ------------------------------------------------------------------------

_RESOURCES = st.one_of(
    st.none(),
    st.just(FB),
    st.lists(st.sampled_from("abcd"), min_size=1, max_size=3).map(tuple),
)


@st.composite
def _batches(draw: st.DrawFn, keyed: bool = True) -> tuple[list[bool], list[Resources], list[int]]:
    read_only = draw(st.lists(st.booleans(), max_size=14))
    n = len(read_only)
    resources: list[Resources] = (
        draw(st.lists(_RESOURCES, min_size=n, max_size=n)) if keyed else [None] * n
    )
    # A stream of choices that drives the simulation; each choice is reduced
    # modulo the number of options available at that point.
    choices = draw(st.lists(st.integers(min_value=0, max_value=10_000), min_size=2 * n + 2))
    return read_only, resources, choices


class _Driver:
    """Runs a schedule to the end: each step finishes a started call or ends an
    unstarted one early (cancelled), as the stream of choices says."""

    def __init__(self, s: Schedule, n: int, choices: list[int]) -> None:
        self.s, self.n, self.stream = s, n, iter(choices)
        self.eligible: set[int] = set()
        self.finished: set[int] = set()
        self.opened = False
        self.log: list[tuple[Any, ...]] = []

    def pick(self, options: Sequence[Any]) -> Any:
        return options[next(self.stream, 0) % len(options)]

    def run(self, check: Any) -> None:
        prefinish = self.pick(range(self.n + 1)) if self.n else 0
        for _ in range(prefinish):
            i = self.pick([i for i in range(self.n) if i not in self.finished])
            self.step("finish", i, check)
        self.step("open", -1, check)
        while len(self.finished) < self.n:
            moves = [i for i in range(self.n) if i not in self.finished]
            started = [i for i in moves if i in self.eligible]
            self.step(
                "finish", self.pick(started if started and self.pick([0, 1, 2]) else moves), check
            )

    def step(self, kind: str, i: int, check: Any) -> None:
        if kind == "open":
            self.opened = True
            became = self.s.open()
        else:
            self.finished.add(i)
            became = self.s.finish(i)
        check(became)
        assert not set(became) & self.eligible, "a call became eligible twice"
        self.eligible.update(became)
        s = self.s
        state = (s.current, s.complete, [s.is_open(k) for k in range(self.n)])
        self.log.append((kind, i, became, _kinds(s), state))


@settings(max_examples=400, deadline=None)
@given(_batches())
def test_no_call_overtakes_one_it_conflicts_with(
    batch: tuple[list[bool], list[Resources], list[int]],
) -> None:
    read_only, resources, choices = batch
    n = len(read_only)
    s = DependencySchedule(read_only, resources)
    before = must_precede(read_only, resources)
    d = _Driver(s, n, choices)

    def check(became: list[int]) -> None:
        assert became == sorted(became)
        for i in became:
            assert i not in d.finished
            # Safety: for every resource, the order of effects is the order submitted.
            late = before[i] - d.finished
            assert not late, f"call {i} eligible before {sorted(late)} finished"
        # Nothing is held back without cause: every call whose predecessors have
        # all finished has been let start (or ended early).
        if d.opened:
            free = {i for i in range(n) if before[i] <= d.finished} - d.finished
            assert free <= d.eligible | set(became), f"held back for nothing: {free}"

    d.run(check)
    assert s.complete and s.current is None
    for i in range(n):
        assert s.waiters_of(i) == [k for k in range(i + 1, n) if i in before[k]]
        assert s.finish(i) == []
    # Each group opens once, when one of its calls is let start, and closes once
    # all of them have finished.
    opened = [g for _, _, _, ts, _ in d.log for k, g in ts if k == "open"]
    closed = [g for _, _, _, ts, _ in d.log for k, g in ts if k == "close"]
    assert sorted(opened) == sorted(set(opened)) == sorted(closed)
    assert set(opened) == {s.group_of(i).index for i in d.eligible}


@settings(max_examples=400, deadline=None)
@given(_batches(keyed=False))
def test_without_keys_it_is_the_barrier_schedule(
    batch: tuple[list[bool], list[Resources], list[int]],
) -> None:
    read_only, resources, choices = batch
    n = len(read_only)
    new = DependencySchedule(read_only, resources)
    old = BarrierSchedule(read_only)
    assert new.groups == old.groups
    for i in range(n):
        assert new.waiters_of(i) == old.waiters_of(i)
    a, b = _Driver(old, n, choices), _Driver(new, n, list(choices))

    a.run(lambda became: None)
    b.run(lambda became: None)
    # At every step: the same calls let start, the same announcements, the same state.
    assert b.log == a.log


def test_hashable_resources_of_any_kind() -> None:
    # The schedule compares resources as they are given: not only bytes.
    keys: list[Hashable] = [1, (1,), "1"]
    s = DependencySchedule([W, W, W], [(k,) for k in keys])
    assert s.open() == [0, 1, 2]
