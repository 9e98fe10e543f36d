"""The stable names: recorded, checked, and the extension protocols exercised for real.

What is stable (docs/reference.md, "About stability"): every name in the
`__all__` of `toolbus` and of the modules documented for users (`STABLE_MODULES`
below), their parameters, the members of their classes, and the extension
protocols: `Backend` and `Job`, `Policy`/`BasePolicy`, the executor's hooks
(options and overridable methods), `Tool.run`, and `drive_sync`/`drive_async`
(`toolbus.pipeline`, whose other names are the engine's own and may change).

`stable_names.json`, next to this file, records them: each module's `__all__`,
and under "names" one entry per `module:Name` and `module:Class.member` with
its kind and, for anything callable, its parameters as `[name, kind,
has_default]`. A name re-exported from several modules is described once, at
its first path, and the others say `same_as` (the same object).

The checks:
- a recorded name or class member that is gone (from its `__all__`, its
  module or its class), a parameter removed or renamed, an optional parameter
  made required, a new required parameter, a parameter's kind narrowed (a
  keyword made keyword-only or positional-only), a positional parameter moved,
  a method made a property (or the reverse), a sync function made async, an
  enum member removed, a re-export that is no longer the same object, or a
  recorded constant's value changed (signal and file names): the test fails
  and names each change;
- a new name, a new member, and a new *optional* parameter pass: callers are
  unaffected (the snapshot update then records them). Parameters whose names
  start with `_` are toolbus's own and not recorded;
- the extension protocols that users *implement* (`EXACT`: `Backend`, the
  policy methods, the hook methods, `Tool.run`, the publisher's and observer
  actor's methods) are held to their exact signature: toolbus calls them, so
  even a new optional parameter there changes what it passes.

A deliberate change is one command plus a CHANGELOG.md entry: write a
migration note under "Unreleased > Migration" in CHANGELOG.md, then run

    python tests/contract/test_stable_names.py --update

(this file's path, wherever it lives; run from anywhere, it imports the
`toolbus` of the checkout this file is in, and needs every extra installed)
and commit the rewritten `stable_names.json` with the change. A failure
message repeats the command with this file's current path.

The second half runs the protocols through real executors: a custom backend
that drives jobs with `drive_sync` (a thread of its own) and `drive_async` (the
executor's loop), a policy using every protocol method, and every hook, as an
option and as an override.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import enum
import functools
import importlib
import inspect
import json
import sys
import threading
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

SNAPSHOT = Path(__file__).with_name("stable_names.json")
_ROOT = next(p for p in Path(__file__).resolve().parents if (p / "toolbus").is_dir())
if __name__ == "__main__":
    sys.path.insert(0, str(_ROOT))  # --update: this checkout's toolbus, whatever is installed

from toolbus import (  # noqa: E402
    AttemptFailure,
    ErrorCode,
    Executor,
    RetryDecision,
    RetryPolicy,
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    bus,
    tool,
)
from toolbus.backends import Backend, Host, Job  # noqa: E402
from toolbus.executor import Submission  # noqa: E402
from toolbus.pipeline import drive_async, drive_sync  # noqa: E402
from toolbus.policies import (  # noqa: E402
    Admit,
    BasePolicy,
    Decision,
    Delay,
    Policy,
    Reject,
    RequireApproval,
    Respond,
    call_timeout,
)

# The modules documented for users, in the order a re-exported name is
# described (its first path here is where its members are recorded).
STABLE_MODULES = (
    "toolbus",
    "toolbus.models",
    "toolbus.approvals",
    "toolbus.masking",
    "toolbus.retry",
    "toolbus.formatting",
    "toolbus.calls",
    "toolbus.hooks",
    "toolbus.scheduling",
    "toolbus.scanning",
    "toolbus.bus",
    "toolbus.policies",
    "toolbus.tools",
    "toolbus.journal",
    "toolbus.backends",
    "toolbus.executor",
    "toolbus.observe",
    "toolbus.providers",
    "toolbus.providers.openai",
    "toolbus.providers.anthropic",
    "toolbus.providers.agent",
    "toolbus.mcp",
    "toolbus.integrations",
    "toolbus.integrations.langchain",
    "toolbus.integrations.langgraph",
    "toolbus.integrations.openai_agents",
    "toolbus.integrations.pydantic_ai",
    "toolbus.integrations.dbos",
    "toolbus.integrations.restate",
    "toolbus.in_doubt",
    "toolbus.config",
    "toolbus.cli",
)

# Documented names outside a stable `__all__`: the drivers custom backends call
# (the rest of toolbus.pipeline is not stable), and the id helper journal.md names.
EXTRA_NAMES = {
    "toolbus.pipeline": ("drive_async", "drive_sync"),
    "toolbus.models": ("generated_id",),
}

CHECKED_MODULES = [*STABLE_MODULES, *(m for m in EXTRA_NAMES if m not in STABLE_MODULES)]

# Implemented by users, called by toolbus: any change of these signatures fails.
EXACT = (
    "toolbus.backends:Backend.",
    "toolbus.policies:Policy.",
    "toolbus.policies:BasePolicy.",
    "toolbus.hooks:ExecutorHooks.",
    "toolbus.bus:Publisher.",
    "toolbus.bus:ObserverActor.on_event",
    "toolbus.bus:ObserverActor.on_message",
    "toolbus:Tool.run",
    *(
        f"toolbus:Executor.{hook}"
        for hook in (
            "pre_execute",
            "is_allowed",
            "mask_arguments",
            "should_retry",
            "max_parallel",
            "post_execute",
        )
    ),
)

# Special methods that are part of a class's use (`with`, calling, iterating).
DUNDERS = frozenset(
    {
        "__call__",
        "__enter__",
        "__exit__",
        "__aenter__",
        "__aexit__",
        "__iter__",
        "__aiter__",
        "__len__",
        "__getitem__",
        "__contains__",
    }
)

UPDATE_HINT = (
    "If this change is deliberate: add a migration note under 'Unreleased > Migration' "
    "in CHANGELOG.md, then record the new snapshot with "
    f"`python {Path(__file__).resolve().relative_to(_ROOT)} --update`."
)

Entry = dict[str, Any]


# -- describing what the code has now -------------------------------------------------


def _params(fn: Any, drop_first: bool = False) -> list[list[Any]] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: its existence is recorded
    params = list(sig.parameters.values())
    if drop_first and params:
        params = params[1:]
    described: list[list[Any]] = []
    for p in params:
        if p.name.startswith("_"):
            continue  # a parameter named `_x` is toolbus's own plumbing, not for callers
        unpacked = _unpacked(fn, p) if p.kind is p.VAR_KEYWORD else None
        if unpacked is not None:
            described.extend(unpacked)
        else:
            described.append([p.name, p.kind.name, p.default is not inspect.Parameter.empty])
    return described


def _unpacked(fn: Any, param: inspect.Parameter) -> list[list[Any]] | None:
    """`**options: Unpack[SomeOptions]` as the keyword-only parameters a type
    checker sees: one per key of the TypedDict (optional unless required).
    So moving an explicit keyword list into a TypedDict changes nothing here."""
    annotation = param.annotation
    if isinstance(annotation, str):
        if "Unpack[" not in annotation:
            return None
        owner = fn.__init__ if isinstance(fn, type) else inspect.unwrap(fn)
        try:
            annotation = eval(annotation, getattr(owner, "__globals__", {}))
        except Exception:
            return None
    if typing.get_origin(annotation) is not typing.Unpack:
        return None
    (options,) = typing.get_args(annotation)
    required = getattr(options, "__required_keys__", frozenset())
    return [[k, "KEYWORD_ONLY", k not in required] for k in options.__annotations__]


def _callable_entry(kind: str, fn: Any, drop_first: bool = False) -> Entry:
    if inspect.iscoroutinefunction(fn):
        kind = f"async {kind}"
    return {"kind": kind, "params": _params(fn, drop_first)}


def _is_alias(obj: Any) -> bool:
    return typing.get_origin(obj) is not None


def _value_entry(obj: Any) -> Entry:
    if _is_alias(obj):
        entry: Entry = {"kind": "alias"}
        if typing.get_origin(obj) is typing.Literal:
            entry["values"] = [repr(v) for v in typing.get_args(obj)]
        return entry
    entry = {"kind": "constant", "type": type(obj).__name__}
    if isinstance(obj, str | int | float) and not isinstance(obj, enum.Enum):
        entry["value"] = obj  # a signal name, a file name, a limit: callers rely on it
    return entry


def _member_entry(cls: type, name: str) -> Entry:
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        return {"kind": "attribute"}  # declared (annotated) only
    if isinstance(raw, staticmethod):
        return _callable_entry("staticmethod", raw.__func__)
    if isinstance(raw, classmethod):
        return _callable_entry("classmethod", raw.__func__, drop_first=True)
    if inspect.isfunction(raw):
        return _callable_entry("method", raw, drop_first=True)
    if isinstance(raw, property | functools.cached_property):
        return {"kind": "property"}
    return {"kind": "attribute"}


def _member_names(cls: type) -> list[str]:
    from pydantic import BaseModel

    names: set[str] = set()
    for base in cls.__mro__:
        if not base.__module__.startswith("toolbus"):
            continue
        names.update(vars(base))
        names.update(inspect.get_annotations(base))
    if issubclass(cls, enum.Enum):
        names -= set(cls.__members__)
    if issubclass(cls, BaseModel):
        names = {n for n in names if not n.startswith("model_")}  # pydantic's
    return sorted(n for n in names if not n.startswith("_") or n in DUNDERS)


def _class_entries(key: str, cls: type) -> dict[str, Entry]:
    entry: Entry = {"kind": "class"}
    if getattr(cls, "_is_protocol", False):
        entry["kind"] = "protocol"  # its members are the contract, not a constructor
    elif issubclass(cls, enum.Enum):
        entry["members"] = list(cls.__members__)
    else:
        entry["params"] = _params(cls)
    out = {key: entry}
    for name in _member_names(cls):
        out[f"{key}.{name}"] = _member_entry(cls, name)
    return out


def _describe(key: str, obj: Any) -> dict[str, Entry]:
    if inspect.ismodule(obj):
        return {key: {"kind": "module", "module": obj.__name__}}
    if inspect.isclass(obj):
        return _class_entries(key, obj)
    if callable(obj) and not _is_alias(obj):
        return {key: _callable_entry("function", obj)}
    return {key: _value_entry(obj)}


def _public_names(module: str) -> list[str]:
    mod = importlib.import_module(module)
    names = list(getattr(mod, "__all__", ())) if module in STABLE_MODULES else []
    return sorted({*names, *EXTRA_NAMES.get(module, ())})


def _shared(obj: Any) -> bool:
    """Whether a re-export of `obj` is recorded as `same_as` its first path."""
    return inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)


def missing_extra(module: str) -> str | None:
    """The optional dependency `module` cannot be imported without, if any."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.split(".")[0] != "toolbus":
            return e.name
        raise
    return None


def describe_all(strict: bool = False) -> dict[str, Any]:
    """The snapshot as the code stands: each module's `__all__`, each name's entries.

    A module whose optional dependency is missing is left out, unless `strict`
    (the update: a record made without the extras would drop their names)."""
    modules: dict[str, list[str]] = {}
    names: dict[str, Entry] = {}
    first_path: dict[int, str] = {}
    for module in CHECKED_MODULES:
        extra = missing_extra(module)
        if extra is not None:
            if strict:
                raise SystemExit(f"{module} needs {extra}: install every extra, then update")
            continue
        mod = importlib.import_module(module)
        if module in STABLE_MODULES:
            modules[module] = sorted(mod.__all__)
        for name in _public_names(module):
            key = f"{module}:{name}"
            obj = getattr(mod, name)
            if _shared(obj) and id(obj) in first_path:
                names[key] = {"same_as": first_path[id(obj)]}
                continue
            if _shared(obj):
                first_path[id(obj)] = key
            names.update(_describe(key, obj))
    return {"modules": modules, "names": dict(sorted(names.items()))}


def write_snapshot(path: Path = SNAPSHOT) -> None:
    """Write the snapshot, one entry a line, so a change shows as a one-line diff."""
    snap = describe_all(strict=True)
    lines = ["{", '  "modules": {']
    mods = list(snap["modules"].items())
    for i, (module, names) in enumerate(mods):
        comma = "," if i < len(mods) - 1 else ""
        lines.append(f"    {json.dumps(module)}: {json.dumps(names)}{comma}")
    lines += ["  },", '  "names": {']
    entries = list(snap["names"].items())
    for i, (key, entry) in enumerate(entries):
        comma = "," if i < len(entries) - 1 else ""
        lines.append(f"    {json.dumps(key)}: {json.dumps(entry)}{comma}")
    lines += ["  }", "}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- comparing with the record -----------------------------------------------------------

_WIDER_KIND = {
    ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"),
    ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD"),
}
_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
_VARIADIC = ("VAR_POSITIONAL", "VAR_KEYWORD")


def param_changes(old: list[list[Any]], new: list[list[Any]]) -> list[str]:
    """What breaks a caller who passed `old`'s parameters, going to `new`'s."""
    found: list[str] = []
    by_name = {p[0]: p for p in new}
    for name, kind, has_default in old:
        now = by_name.get(name)
        if now is None:
            found.append(f"parameter {name!r} was removed or renamed")
            continue
        if now[1] != kind and (kind, now[1]) not in _WIDER_KIND:
            found.append(f"parameter {name!r} changed from {kind} to {now[1]}")
        if has_default and not now[2]:
            found.append(f"parameter {name!r} became required")
    old_names = {p[0] for p in old}
    for name, kind, has_default in new:
        if name not in old_names and not has_default and kind not in _VARIADIC:
            found.append(f"new required parameter {name!r}")
    old_pos = [p[0] for p in old if p[1] in _POSITIONAL]
    new_pos = [p[0] for p in new if p[1] in _POSITIONAL]
    if new_pos[: len(old_pos)] != old_pos and not found:
        found.append(f"positional parameters moved: {old_pos} -> {new_pos}")
    return found


def entry_changes(key: str, old: Entry, new: Entry) -> list[str]:
    """What breaks users of `key` from `old` to `new` (EXACT keys: any change)."""
    if any(key == e or (e.endswith(".") and key.startswith(e)) for e in EXACT):
        if old == new:
            return []
        return [f"extension protocol (users implement it) changed: {old} -> {new}"]
    kinds = {old.get("kind"), new.get("kind")}
    if old.get("kind") != new.get("kind") and kinds != {"attribute", "property"}:
        return [f"was a {old.get('kind')}, is now a {new.get('kind')}"]
    found: list[str] = []
    if old.get("params") is not None:
        if new.get("params") is None:
            found.append("its signature can no longer be read")
        else:
            found += param_changes(old["params"], new["params"])
    for field in ("value", "values", "module"):
        if field in old and old[field] != new.get(field):
            found.append(f"{field} changed: {old[field]!r} -> {new.get(field)!r}")
    if "members" in old:
        gone = [m for m in old["members"] if m not in new.get("members", ())]
        if gone:
            found.append(f"enum members removed: {gone}")
    return found


def _resolve(key: str) -> Any:
    module, _, path = key.partition(":")
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _describe_key(key: str) -> Entry | None:
    """`key` described on its own: for a name now described at another path
    (a re-export whose first path moved), or None if it is gone."""
    module, _, path = key.partition(":")
    owner, _, member = path.rpartition(".")
    try:
        if owner:  # "module:Class.member"
            cls = _resolve(f"{module}:{owner}")
            return _member_entry(cls, member) if member in _member_names(cls) else None
        return _describe(key, _resolve(key))[key]
    except AttributeError:
        return None


@functools.cache
def _current() -> dict[str, Any]:
    return describe_all()


@functools.cache
def _recorded() -> dict[str, Any]:
    snap: dict[str, Any] = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    return snap


def _fail(module: str, problems: list[str]) -> None:
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        pytest.fail(f"{module}: stable names changed:\n{listed}\n{UPDATE_HINT}", pytrace=False)


def _importable(module: str) -> None:
    extra = missing_extra(module)
    if extra is not None:
        pytest.skip(f"{module} needs {extra}, an optional extra")


@pytest.mark.parametrize("module", list(STABLE_MODULES))
def test_every_all_name_resolves(module: str) -> None:
    _importable(module)
    mod = importlib.import_module(module)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names what the module lacks: {missing}"
    assert len(set(mod.__all__)) == len(mod.__all__), f"{module}.__all__ repeats a name"


@pytest.mark.parametrize("module", list(STABLE_MODULES))
def test_all_keeps_every_recorded_name(module: str) -> None:
    _importable(module)
    recorded = _recorded()["modules"].get(module)
    if recorded is None:
        pytest.fail(f"{module} is not in {SNAPSHOT.name} yet. {UPDATE_HINT}", pytrace=False)
    now = set(importlib.import_module(module).__all__)
    # A new name passes (the update records it); a name gone from __all__ fails.
    _fail(module, [f"{n!r} is no longer in __all__" for n in recorded if n not in now])


@pytest.mark.parametrize("module", CHECKED_MODULES)
def test_stable_names_keep_their_signatures(module: str) -> None:
    _importable(module)
    recorded = {k: v for k, v in _recorded()["names"].items() if k.startswith(f"{module}:")}
    assert recorded or not _public_names(module), f"nothing recorded for {module}. {UPDATE_HINT}"
    current = _current()["names"]
    problems: list[str] = []
    for key, old in recorded.items():
        if "same_as" in old:
            try:
                same = _resolve(key) is _resolve(old["same_as"])
            except AttributeError:
                same = False
            if not same:
                problems.append(f"{key} is no longer the same object as {old['same_as']}")
            continue
        new = current.get(key) or _describe_key(key)
        if new is None:
            problems.append(f"{key} is gone")
            continue
        problems += [f"{key}: {p}" for p in entry_changes(key, old, new)]
    _fail(module, problems)


def test_param_changes_tell_breaking_from_compatible() -> None:
    """The rules themselves, on made-up signatures."""
    old = [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "KEYWORD_ONLY", True]]
    assert param_changes(old, [*old, ["c", "KEYWORD_ONLY", True]]) == []  # new optional: fine
    assert param_changes(old, [old[0], ["b", "POSITIONAL_OR_KEYWORD", True]]) == []
    assert param_changes(old, [old[0]]) == ["parameter 'b' was removed or renamed"]
    assert param_changes(old, [old[0], ["b", "KEYWORD_ONLY", False]]) == [
        "parameter 'b' became required"
    ]
    assert param_changes(old, [*old, ["c", "KEYWORD_ONLY", False]]) == [
        "new required parameter 'c'"
    ]
    assert param_changes(old, [["a", "KEYWORD_ONLY", False], old[1]]) == [
        "parameter 'a' changed from POSITIONAL_OR_KEYWORD to KEYWORD_ONLY"
    ]
    swapped = [["x", "POSITIONAL_OR_KEYWORD", True], ["y", "POSITIONAL_OR_KEYWORD", True]]
    assert param_changes(swapped, swapped[::-1]) == [
        "positional parameters moved: ['x', 'y'] -> ['y', 'x']"
    ]
    hook = "toolbus.policies:BasePolicy.admit"
    grown = {"kind": "method", "params": [*old, ["c", "KEYWORD_ONLY", True]]}
    assert entry_changes(hook, {"kind": "method", "params": old}, grown)  # exact: fails


# -- the extension protocols, run for real -----------------------------------------------


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


class _Counted:
    """The bookkeeping both custom backends share (all on the supervisor's thread)."""

    can_kill = False
    carries_context = "all"

    def __init__(self) -> None:
        self.host: Host | None = None
        self.attempts: list[tuple[int, float | None]] = []
        self.running: dict[int, Any] = {}
        self.gave_up: set[int] = set()
        self.released: list[Any] = []
        self.cancelled = 0
        self.stopped = False

    def check(self, tool: Tool) -> None:
        if tool.name == "refused":
            raise ValueError("this backend refuses tools named 'refused'")

    def start(self, host: Host) -> None:
        self.host = host

    def release(self, job: Job, worker: Any) -> None:
        self.running.pop(id(job), None)
        self.gave_up.discard(id(job))
        self.released.append(worker)

    def cancel(self, job: Job) -> None:
        self.cancelled += 1
        if id(job) in self.running:
            self.gave_up.add(id(job))

    def kill(self, job: Job) -> bool:
        return False

    def busy(self, tool: Tool | None = None) -> int:
        return len(self.running) - len(self.gave_up)

    def abandoned(self, tool: Tool | None = None) -> int:
        return len(self.gave_up)

    def stop(self) -> None:
        self.stopped = True


class OwnThreads(_Counted):
    """A custom backend: each sync job on a thread of its own, driven by `drive_sync`."""

    name = "own-threads"
    uses_threads = True

    def submit(self, job: Job) -> None:
        host = self.host
        assert host is not None
        self.attempts.append((job.attempt, job.remaining))

        def work() -> None:
            job.progress(host.services, "started on a thread of its own", fraction=0.0)
            steps = job.steps(host.services)
            outcome = job.context.copy().run(drive_sync, steps, job.run, host.loop)
            host.report(job, outcome, threading.current_thread().name)

        thread = threading.Thread(target=work, name=f"own-{len(self.attempts)}", daemon=True)
        self.running[id(job)] = thread
        thread.start()


class OnTheLoop(_Counted):
    """A custom backend: each async job a task on the executor's loop, driven by `drive_async`."""

    name = "on-the-loop"
    uses_threads = False

    def check(self, tool: Tool) -> None:
        super().check(tool)
        if not tool.is_async:
            raise ValueError(f"{tool.name!r} is sync: it would block the loop")

    def submit(self, job: Job) -> None:
        host = self.host
        assert host is not None
        self.attempts.append((job.attempt, job.remaining))

        async def work() -> None:
            outcome = await drive_async(job.steps(host.services), job.run)
            host.report(job, outcome, "loop")

        # In the caller's context, as the protocol promises the tool runs.
        self.running[id(job)] = job.context.copy().run(host.loop.submit, work())

    def cancel(self, job: Job) -> None:
        task = self.running.get(id(job))
        super().cancel(job)
        if task is not None:
            task.cancel()  # cooperatively: the tool's coroutine is cancelled


def test_custom_backends_run_jobs_with_drive_sync_and_drive_async(
    registry: ToolRegistry,
) -> None:
    threads, loop = OwnThreads(), OnTheLoop()
    assert isinstance(threads, Backend) and isinstance(loop, Backend)
    request: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="")
    flaky_runs: list[int] = []

    @registry.tool(backend="mine", timeout=9)
    def where(x: int) -> dict[str, Any]:
        return {"x": x, "thread": threading.current_thread().name, "request": request.get()}

    @registry.tool(backend="mine", retry=RetryPolicy(max_retries=1, backoff_base=0, jitter=0))
    def flaky() -> str:
        flaky_runs.append(1)
        if len(flaky_runs) == 1:
            raise ConnectionError("first attempt fails")
        return "second attempt"

    @registry.tool(backend="async-mine", read_only=True)
    async def later(x: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"x": x, "request": request.get()}

    ex = Executor(registry, backends={"mine": threads, "async-mine": loop})
    with ex, bus.Recorder(bus.PROGRESS, sender=ex) as progress:
        request.set("req-1")
        r = ex.execute(ToolCall(id="a", name="where", arguments={"x": 1}))
        assert r.status == "ok", r.error
        assert r.output == {"x": 1, "thread": "own-1", "request": "req-1"}
        assert ex.execute(ToolCall(name="flaky")).output == "second attempt"
        batch = ex.execute_batch([ToolCall(name="later", arguments={"x": i}) for i in range(3)])
        assert [b.output for b in batch] == [{"x": i, "request": "req-1"} for i in range(3)]
        progress.wait_for(bus.PROGRESS, 3)
    # Each attempt is one job with its own deadline, released once it reported.
    assert [a for a, _ in threads.attempts] == [1, 1, 2]
    remaining = threads.attempts[0][1]
    assert remaining is not None and 0 < remaining <= 9
    assert threads.released == ["own-1", "own-2", "own-3"]
    assert loop.released == ["loop"] * 3
    assert threads.stopped and loop.stopped
    assert threads.busy() == loop.busy() == 0


def test_a_custom_backend_refuses_a_tool_at_registration(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="is sync"):

        @registry.tool(backend=OnTheLoop())
        def sync_tool() -> str:
            return "never"


def test_a_deadline_cancels_jobs_on_custom_backends(registry: ToolRegistry) -> None:
    threads, loop = OwnThreads(), OnTheLoop()
    never: list[asyncio.Future[None]] = []

    @registry.tool(backend="mine", timeout=0.2, read_only=True)
    def stuck(ctx: ToolContext) -> str:
        ctx.wait_cancelled(30)  # returns when the deadline cancels the call
        return "late"

    @registry.tool(backend="async-mine", timeout=0.2, read_only=True)
    async def stuck_async() -> str:
        never.append(asyncio.get_running_loop().create_future())
        await never[0]  # cancelled at the deadline
        return "late"

    with Executor(registry, backends={"mine": threads, "async-mine": loop}) as ex:
        for name in ("stuck", "stuck_async"):
            r = ex.execute(ToolCall(name=name))
            assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT), name
    # The supervisor gave each job up at its deadline, through the protocol.
    assert threads.cancelled == loop.cancelled == 1


class EveryMethod(BasePolicy):
    """A policy using every part of the protocol; `admit` does what the call's `do` says."""

    name = "every-method"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: list[tuple[str, str]] = []
        self.results: list[tuple[str, str]] = []
        self.timeouts_seen: list[float | None] = []
        self.waiting = threading.Event()
        self.dropped: list[ToolResult] = []
        self.dropped_event = threading.Event()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        ready.set_result(None)
        self.ready = ready

    def applies_to(self, tool: Tool) -> bool:
        return tool.name != "unguarded"

    def check(self, tool: Tool) -> None:
        if tool.name == "refused":
            raise ValueError("every-method refuses 'refused'")

    def timeout(self, tool: Tool, default: float | None) -> float | None:
        return 12.5 if tool.name == "guarded" else default

    def tools(self) -> Sequence[Tool]:
        @tool(name="policy_helper", read_only=True)
        def helper() -> str:
            return "brought along by the policy"

        return [helper]

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        assert isinstance(call.arguments, dict)
        do = str(call.arguments.get("do", "admit"))
        with self.lock:
            self.asked.append((call.id, do))
            asked_before = sum(1 for c, _ in self.asked if c == call.id) > 1
            self.timeouts_seen.append(call_timeout())
        if do == "reject":
            return Reject(ErrorCode.TOOL_NOT_ALLOWED, "every-method says no")
        if do == "respond":
            return Respond(ToolResult(call_id="-", name="-", status="ok", output="from the policy"))
        if do == "approve":
            return RequireApproval("a person decides")
        if do == "delay" and not asked_before:
            return Delay(60, "until the future is done", until=self.ready)
        if do == "wait":
            self.waiting.set()
            return Delay(60, "until the executor closes")
        return Admit()

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        with self.lock:
            self.results.append((call.id, result.status))
        assert isinstance(call.arguments, dict)
        if call.arguments.get("do") == "replace":
            return result.model_copy(update={"output": "replaced by the policy"})
        return None

    def on_dropped(self, call: ToolCall, result: ToolResult, now: float) -> None:
        self.dropped.append(result)
        self.dropped_event.set()


class PlainPolicy:
    """The protocol's two methods and nothing else (no BasePolicy)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        return Admit()

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        self.seen.append(call.id)
        return None


class Ordered(BasePolicy):
    """Records the thread and the order policies were asked in."""

    def __init__(
        self, name: str, order: list[str], first: bool = False, at_submission: bool = False
    ) -> None:
        self.name, self.order, self.first, self.at_submission = name, order, first, at_submission
        self.threads: list[str] = []

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        self.order.append(self.name)
        self.threads.append(threading.current_thread().name)
        return Admit()


def test_a_custom_policy_through_every_protocol_method(registry: ToolRegistry) -> None:
    policy, plain = EveryMethod(), PlainPolicy()
    assert isinstance(policy, Policy) and isinstance(plain, Policy)
    order: list[str] = []
    submitted = Ordered("at-submission", order, at_submission=True)
    first = Ordered("first", order, first=True)

    @registry.tool
    def guarded(do: str, ctx: ToolContext) -> dict[str, Any]:
        return {"do": do, "remaining": ctx.remaining}

    @registry.tool
    def unguarded(do: str) -> str:
        return do

    with pytest.raises(ValueError, match="refuses 'refused'"):

        @registry.tool(policies=[policy])
        def refused() -> str:
            return "never"

    ex = Executor(registry, policies=[plain, policy, submitted, first], timeout=30)
    with ex:

        def call(do: str, name: str = "guarded", **kw: Any) -> ToolResult:
            return ex.execute(ToolCall(id=f"{name}-{do}", name=name, arguments={"do": do}), **kw)

        ok = call("admit")
        assert ok.status == "ok"
        # timeout(tool, default): the attempt's deadline, as call_timeout() tells policies.
        assert 0 < ok.output["remaining"] <= 12.5
        assert 12.5 in policy.timeouts_seen
        assert (call("reject").status, call("reject").error) == ("rejected", "every-method says no")
        responded = call("respond")
        assert (responded.output, responded.attempts, responded.call_id) == (
            "from the policy",
            0,
            "guarded-respond",
        )
        deferred = call("approve")
        assert deferred.status == "deferred" and deferred.approval_request is not None
        approved = call("approve", approval=deferred.approval_request.approve())
        assert approved.status == "ok"
        assert call("delay").status == "ok"
        assert [d for c, d in policy.asked if c == "guarded-delay"] == ["delay", "delay"]
        assert call("replace").output == "replaced by the policy"
        assert call("anything", name="unguarded").output == "anything"
        assert ex.execute(ToolCall(name="policy_helper")).output == "brought along by the policy"

        # on_dropped: a call waiting on a Delay ends when the executor closes.
        waiting: dict[str, ToolResult] = {}
        caller = threading.Thread(target=lambda: waiting.setdefault("r", call("wait")))
        caller.start()
        assert policy.waiting.wait(5)
    caller.join(5)
    assert waiting["r"].status == "cancelled"
    assert policy.dropped_event.wait(5)
    assert [r.call_id for r in policy.dropped] == ["guarded-wait"]
    assert ("guarded-wait", "cancelled") not in policy.results  # never admitted
    assert not any(c.startswith("unguarded") for c, _ in policy.asked)  # applies_to
    assert ("guarded-replace", "ok") in policy.results
    assert "guarded-admit" in plain.seen
    # first: before every other policy; at_submission: asked on the caller's thread.
    assert order[:2] == ["at-submission", "first"]
    assert submitted.threads[0] == threading.current_thread().name


def test_executor_hook_options(registry: ToolRegistry) -> None:
    seen: list[Any] = []
    flaky_runs: list[int] = []

    @registry.tool
    def double(x: int, api_key: str = "") -> int:
        return x * 2

    @registry.tool(retry=RetryPolicy(max_retries=0))
    def flaky() -> str:
        flaky_runs.append(1)
        if len(flaky_runs) == 1:
            raise ConnectionError("first attempt fails")
        return "second attempt"

    @registry.tool
    def forbidden() -> str:
        return "never"

    def pre(call: ToolCall) -> ToolCall:
        assert isinstance(call.arguments, dict)
        if call.name != "double":
            return call
        return call.with_arguments({**call.arguments, "x": call.arguments["x"] + 1})

    async def pre_async(call: ToolCall) -> ToolCall:
        seen.append(("pre_async", call.name))
        return call

    def authorize(call: ToolCall) -> bool:
        return call.name != "forbidden"

    def masker(call: ToolCall) -> Any:
        return {"masked": call.name}

    def concurrency(calls: Sequence[ToolCall]) -> int:
        seen.append(("concurrency", len(calls)))
        return 1

    def post(call: ToolCall, result: ToolResult) -> ToolResult:
        if call.name != "double":
            return result
        return result.model_copy(update={"output": result.output * 10})

    async def post_async(call: ToolCall, result: ToolResult) -> ToolResult:
        seen.append(("post_async", call.name))
        return result

    def on_submit(submission: Submission) -> None:
        seen.append(("submitted", submission.call_ids, submission.batch_id is None))

    ex = Executor(
        registry,
        pre_call=[pre, pre_async],
        post_call=[post, post_async],
        authorize=authorize,
        masker=masker,
        concurrency=concurrency,
        retry=RetryPolicy(max_retries=1, backoff_base=0, jitter=0, retry_on=(ConnectionError,)),
    )
    with ex, bus.Recorder(bus.EXECUTING, sender=ex) as rec:
        remove = ex.on_submit(on_submit)
        r = ex.execute(ToolCall(id="d", name="double", arguments={"x": 1, "api_key": "s3cr3t"}))
        assert r.output == 40  # (1 + 1) * 2 * 10
        remove()
        batch = ex.execute_batch([ToolCall(name="forbidden"), ToolCall(name="flaky")])
        assert (batch[0].status, batch[0].error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
        # The executor's retry= applies: the tool's own max_retries=0 replaces it.
        assert (batch[1].status, batch[1].attempts) == ("error", 1)
        (executing,) = rec.wait_for(bus.EXECUTING, where=lambda e: e.call_id == "d")
        assert executing.arguments == {"masked": "double"}
    assert ("submitted", ("d",), True) in seen
    assert ("concurrency", 2) in seen
    assert ("pre_async", "double") in seen and ("post_async", "double") in seen


class Overridden(Executor):
    """Every hook method overridden, deferring to the default where it does not decide."""

    def __init__(self, registry: ToolRegistry, log: list[str]) -> None:
        super().__init__(registry, retry=RetryPolicy(max_retries=0))
        self.log = log

    def pre_execute(self, call: ToolCall) -> Any:
        self.log.append(f"pre_execute {call.name}")
        return super().pre_execute(call)

    async def is_allowed(self, call: ToolCall) -> bool:
        return not call.name.startswith("admin_")

    def mask_arguments(self, call: ToolCall) -> Any:
        return {"hidden": True}

    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
        if isinstance(failure.error, ConnectionError) and failure.attempt < 2:
            return RetryDecision(retry=True, delay=0)
        return super().should_retry(call, failure)

    def max_parallel(self, calls: Sequence[ToolCall]) -> int:
        self.log.append(f"max_parallel {len(calls)}")
        return super().max_parallel(calls)

    async def post_execute(self, call: ToolCall, result: ToolResult) -> ToolResult:
        done = await asyncio.sleep(0, result)  # an async hook is awaited
        return done.model_copy(update={"metadata": {**done.metadata, "audited": True}})


class SyncParams(Tool):
    """A tool class with `run(self, params)`: the arguments as validated."""

    name = "sync_params"
    description = "Echo a key."
    parameters: typing.ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
    }

    def run(self, params: Any) -> str:
        return f"value of {params['key']}"


class AsyncWithContext(Tool):
    """A tool class with `async run(self, params, ctx)`."""

    name = "async_ctx"
    description = "Say which call this is."

    async def run(self, params: Any, ctx: ToolContext) -> str:  # type: ignore[override]
        await asyncio.sleep(0)
        return f"{ctx.call_id} attempt {ctx.attempt}"


def test_executor_hook_overrides_and_tool_run_overrides(registry: ToolRegistry) -> None:
    log: list[str] = []
    runs: list[int] = []
    registry.register(SyncParams())
    registry.register(AsyncWithContext())

    @registry.tool
    def flaky() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise ConnectionError("first attempt fails")
        return "second attempt"

    @registry.tool
    def admin_reset() -> str:
        return "never"

    with Overridden(registry, log) as ex, bus.Recorder(bus.EXECUTING, sender=ex) as rec:
        r = ex.execute(ToolCall(id="k", name="sync_params", arguments={"key": "a"}))
        assert (r.output, r.metadata.get("audited")) == ("value of a", True)
        assert ex.execute(ToolCall(id="c", name="async_ctx")).output == "c attempt 1"
        f = ex.execute(ToolCall(name="flaky"))
        assert (f.status, f.output, f.attempts) == ("ok", "second attempt", 2)
        denied = ex.execute(ToolCall(name="admin_reset"))
        assert (denied.status, denied.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
        ex.execute_batch([ToolCall(name="sync_params", arguments={"key": k}) for k in "xy"])
        (executing,) = rec.wait_for(bus.EXECUTING, where=lambda e: e.call_id == "k")
        assert executing.arguments == {"hidden": True}
    assert "pre_execute sync_params" in log and "max_parallel 2" in log
    # Without an executor, the tool runs its run() the same way.
    assert SyncParams().execute({"key": "b"}).output == "value of b"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(f"usage: python {sys.argv[0]} --update   (rewrites {SNAPSHOT.name})")
    write_snapshot()
    import toolbus

    print(f"wrote {SNAPSHOT} from {Path(toolbus.__file__).parent}")
