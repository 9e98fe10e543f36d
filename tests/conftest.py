"""Shared fixtures: executors that are always closed, and a few standard tools."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from toolbus import Executor, ToolRegistry, bus

MakeExecutor = Callable[..., Executor]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: tools that hang wait on it, so no test leaves threads blocked forever."""
    ev = threading.Event()
    yield ev
    ev.set()


@pytest.fixture
def make_executor() -> Iterator[MakeExecutor]:
    made: list[Executor] = []

    def make(registry: ToolRegistry, **options: Any) -> Executor:
        ex = Executor(registry, **options)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        ex.close()


@pytest.fixture
def recorder() -> Iterator[bus.Recorder]:
    with bus.Recorder() as rec:
        yield rec
