"""The task table alone (`toolbus.mcp._tasks`), on a fake clock: lifetimes,
owners, the bound on how many are kept, pages, and terminal states."""

from __future__ import annotations

from typing import Any

import pytest

from toolbus.mcp._tasks import TaskTable


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def table(**options: int) -> tuple[TaskTable, Clock]:
    clock = Clock()
    return TaskTable(clock=clock, **options), clock


def test_a_task_is_its_owners_alone() -> None:
    tasks, _ = table()
    mine = tasks.create("alice", "build")
    assert mine is not None and len(mine.id) >= 22  # 128 random bits
    assert tasks.find(mine.id, "alice") is mine
    assert tasks.find(mine.id, "bob") is None
    assert tasks.find(mine.id, None) is None
    assert tasks.find("made-up", "alice") is None
    assert tasks.find(None, "alice") is None
    nobodys = tasks.create(None, "build")
    assert nobodys is not None and tasks.find(nobodys.id, None) is nobodys


@pytest.mark.parametrize(
    ("asked", "kept"),
    [(None, 3_600_000), (60_000, 60_000), (10**12, 3_600_000), (5, 1000), (True, 3_600_000)],
)
def test_a_lifetime_is_the_clients_within_bounds(asked: object, kept: int) -> None:
    tasks, _ = table()
    task = tasks.create("a", "build", asked)
    assert task is not None and task.ttl_ms == kept


def test_a_task_is_dropped_when_its_lifetime_ends() -> None:
    tasks, clock = table()
    task = tasks.create("a", "build", 60_000)
    assert task is not None
    clock.now += 59.9
    assert tasks.find(task.id, "a") is task
    clock.now += 0.1
    assert tasks.find(task.id, "a") is None and tasks.page("a") == ([], None)
    assert tasks.expired() == [task] and tasks.all() == []


def test_expired_returns_the_tasks_dropped() -> None:
    tasks, clock = table()
    short = tasks.create("a", "build", 1000)
    long = tasks.create("a", "build", 60_000)
    clock.now += 2
    assert tasks.expired() == [short] and tasks.all() == [long]


def test_an_owner_is_bounded_alone() -> None:
    tasks, _ = table(per_owner=2)
    mine = [tasks.create("a", "t"), tasks.create("a", "t")]
    assert tasks.create("a", "t") is None  # its own two run
    assert tasks.create("b", "t") is not None  # another's are not in its way
    assert mine[0] is not None and tasks.settle(mine[0], "completed")
    assert tasks.create("a", "t") is not None  # its own oldest ended one went
    assert mine[0] not in tasks.all() and mine[1] in tasks.all()


def test_beyond_the_bound_the_oldest_ended_goes_and_with_none_ended_none_is_made() -> None:
    tasks, _ = table(max_tasks=2)
    first, second = tasks.create("a", "t"), tasks.create("a", "t")
    assert first is not None and second is not None
    assert tasks.create("a", "t") is None  # both still running
    assert tasks.settle(second, "completed")
    third = tasks.create("a", "t")
    assert third is not None and tasks.all() == [first, third]


def test_a_task_that_ended_stays_as_it_ended() -> None:
    tasks, clock = table()
    task = tasks.create("a", "t")
    assert task is not None and task.status == "working" and not task.terminal
    clock.now += 1
    assert tasks.settle(task, "input_required", "asks")
    assert (task.status, task.message, task.updated) == ("input_required", "asks", clock.now)
    assert tasks.settle(task, "cancelled", "by request")
    assert not tasks.settle(task, "completed")
    assert (task.status, task.message) == ("cancelled", "by request")
    fields = task.fields()
    assert fields["status"] == "cancelled" and fields["statusMessage"] == "by request"
    assert fields["createdAt"].endswith("Z") and fields["lastUpdatedAt"] > fields["createdAt"]


def test_pages_follow_a_cursor_and_refuse_one_not_given() -> None:
    tasks, _ = table()
    made = [tasks.create("a", "t") for _ in range(5)]
    tasks.create("b", "t")
    first, cursor = tasks.page("a", size=2)
    assert first == made[:2] and cursor is not None
    second, cursor = tasks.page("a", cursor, size=2)
    assert second == made[2:4] and cursor is not None
    last, cursor = tasks.page("a", cursor, size=2)
    assert last == made[4:] and cursor is None
    with pytest.raises(ValueError, match="not a cursor"):
        tasks.page("a", "x1")
    assert tasks.page("nobody") == ([], None)


def test_nobodys_tasks_are_bounded_in_all_only() -> None:
    """2026-07-28 without a token: one client's tasks took every other's room."""
    tasks, _ = table(per_owner=2, max_tasks=5)
    assert all(tasks.create(None, "t") is not None for _ in range(5))
    assert tasks.create(None, "t") is None


def test_an_evicted_task_is_told() -> None:
    tasks, _ = table(max_tasks=1)
    let_go: list[object] = []
    tasks.evicted = let_go.append
    first = tasks.create("a", "t")
    assert first is not None and tasks.settle(first, "completed")
    assert tasks.create("a", "t") is not None and let_go == [first]


def test_the_mcp_name_header_names_a_task_or_none() -> None:
    """Over HTTP (2026-07-28) `Mcp-Name` mirrors the task id: decoded as the
    SDK encodes it; one that cannot be decoded names no task (a mismatch,
    as the SDK takes it for `tools/call`); absent, or another version: None."""
    from types import SimpleNamespace

    from mcp.shared.inbound import encode_header_value

    from toolbus.mcp._task_protocol import named_task

    def ctx(headers: dict[str, str], version: str = "2026-07-28") -> Any:
        return SimpleNamespace(request=SimpleNamespace(headers=headers), protocol_version=version)

    assert named_task(ctx({"mcp-name": "abc"})) == "abc"
    assert named_task(ctx({"mcp-name": encode_header_value("ä x")})) == "ä x"
    assert named_task(ctx({"mcp-name": "=?base64?!!!?="})) == ""
    assert named_task(ctx({})) is None
    assert named_task(ctx({"mcp-name": "abc"}, "2025-11-25")) is None
