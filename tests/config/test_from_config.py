"""Configuration files: `Executor.from_config`, `toolbus.toml` and `[tool.toolbus]`.

The policies `rate_limit` and `cache` are faked here (`fake_policies`): the
tests check that a configured tool gets what the factory returned, made with
the file's values, whatever the real policies do.
"""

from __future__ import annotations

import inspect
import math
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import toolbus
import toolbus.policies
from toolbus import ConfigError, Executor, RetryPolicy, Tool, ToolCall, ToolRegistry
from toolbus.backends import ThreadBackend
from toolbus.config import EXECUTOR_KEYS, Config, apply_config, find_config, load_config
from toolbus.models import ErrorCode
from toolbus.policies import BasePolicy, Reject, spill
from toolbus.providers.openai import chat_tool_definitions
from toolbus.tools import sequence


@dataclass(eq=False)
class FakePolicy(BasePolicy):
    """What the fake factories return: remembers how it was made."""

    factory: str = ""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    reject: bool = False

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Any:
        if self.reject:
            return Reject(ErrorCode.TOOL_NOT_ALLOWED, f"refused by {self.factory}")
        return super().admit(call, tool, now)


@pytest.fixture
def fake_policies(monkeypatch: pytest.MonkeyPatch) -> list[FakePolicy]:
    """`toolbus.policies.rate_limit` and `cache` replaced by fakes; every
    policy they make is recorded in the list returned."""
    made: list[FakePolicy] = []

    def rate_limit(limit: str, **kwargs: Any) -> FakePolicy:
        if "/" not in limit:
            raise ValueError(f"rate_limit: expected 'N/unit', got {limit!r}")
        made.append(FakePolicy(factory="rate_limit", args=(limit,), kwargs=kwargs))
        return made[-1]

    def cache(*, ttl: float, maxsize: int = 1024) -> FakePolicy:
        made.append(FakePolicy(factory="cache", kwargs={"ttl": ttl}))
        return made[-1]

    monkeypatch.setattr(toolbus.policies, "rate_limit", rate_limit, raising=False)
    monkeypatch.setattr(toolbus.policies, "cache", cache, raising=False)
    return made


class OwnPolicy(BasePolicy):
    name = "own"


OWN = OwnPolicy()


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True, timeout=30, policies=[OWN])
    def search(query: str) -> str:
        """Search the web."""
        return f"results for {query}"

    @registry.tool(read_only=True)
    def market_data(symbol: str) -> dict[str, Any]:
        """A price."""
        return {"symbol": symbol, "price": 1.0}

    @registry.tool
    def code_exec(code: str) -> str:
        """Run code (mutating)."""
        return code

    return registry


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry()


@pytest.fixture
def made() -> Iterator[list[Executor]]:
    executors: list[Executor] = []
    yield executors
    for ex in executors:
        ex.close()


def write(directory: Path, text: str, name: str = "toolbus.toml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def from_config(
    made: list[Executor], registry: ToolRegistry, path: Any = None, **overrides: Any
) -> Executor:
    ex = Executor.from_config(registry, path, **overrides)
    made.append(ex)
    return ex


SEED = """
max_parallel = 4
timeout = 12.5
retries = 2
name = "configured"
secret_keys = ["passphrase"]

[tools."search"]
rate_limit = "10/minute"
timeout = 30

[tools."market_data"]
cache_ttl = 300
rate_limit = "100/minute"

[tools."code_exec"]
enabled = false
timeout = 5
"""


def test_the_seed_configuration(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor], fake_policies: list[FakePolicy]
) -> None:
    ex = from_config(made, registry, write(tmp_path, SEED))
    assert ex.parallel_limit == 4
    assert ex.timeout == 12.5
    assert ex.retry_policy.max_retries == 2
    assert ex.name == "configured"
    assert "passphrase" in ex._secret_keys.extra
    # A disabled tool is not exported, and not callable.
    assert ex.registry.names() == ["search", "market_data"]
    assert [d["function"]["name"] for d in chat_tool_definitions(ex.registry)] == [
        "search",
        "market_data",
    ]
    result = ex.execute(ToolCall(name="code_exec", arguments={"code": "rm -rf /"}))
    assert result.error_code == ErrorCode.TOOL_NOT_FOUND
    assert "code_exec" not in (result.error or "").split("Available tools:")[1]
    assert ex.execute(ToolCall(name="search", arguments={"query": "x"})).output == "results for x"
    # Policies made with the file's values, after the tool's own; the cache first.
    search, market = ex.registry.get("search"), ex.registry.get("market_data")
    assert search is not None and market is not None
    assert search.policies[0] is OWN
    assert [(p.factory, p.args, p.kwargs) for p in search.policies[1:]] == [
        ("rate_limit", ("10/minute",), {})
    ]
    assert [(p.factory, p.args, p.kwargs) for p in market.policies] == [
        ("cache", (), {"ttl": 300}),
        ("rate_limit", ("100/minute",), {}),
    ]


def test_the_callers_registry_is_not_changed(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor], fake_policies: list[FakePolicy]
) -> None:
    before = {t.name: (t, t.timeout, t.retry, t.policies) for t in registry.list()}
    ex = from_config(made, registry, write(tmp_path, SEED))
    assert ex.registry is not registry
    assert {t.name: (t, t.timeout, t.retry, t.policies) for t in registry.list()} == before
    # Registering on the executor's registry leaves the caller's alone too.
    ex.registry.register(toolbus.FunctionTool(lambda: "later", name="later"))
    assert "later" not in registry
    # A second executor from the same file gets policies of its own.
    first = len(fake_policies)
    other = from_config(made, registry, write(tmp_path, SEED))
    assert len(fake_policies) == 2 * first
    ours, theirs = ex.registry.get("search"), other.registry.get("search")
    assert ours is not None and theirs is not None
    assert ours.policies[1] is not theirs.policies[1]


def test_file_values_win_over_the_decorators(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor]
) -> None:
    path = write(
        tmp_path,
        '[tools."search"]\ntimeout = 2\nretries = 3\n[tools."market_data"]\ntimeout = inf\n',
    )
    ex = from_config(made, registry, path)
    search = ex.registry.get("search")
    assert search is not None
    assert search.timeout == 2
    assert search.retry == RetryPolicy(max_retries=3)
    assert search.policies == (OWN,)  # nothing configured: the tool's own, as they were
    market = ex.registry.get("market_data")
    assert market is not None and market.timeout == math.inf
    # A tool the file does not configure is the caller's own object.
    assert ex.registry.get("code_exec") is registry.get("code_exec")


def test_memory_limit_and_backend(tmp_path: Path, made: list[Executor]) -> None:
    registry = ToolRegistry()
    registry.register(toolbus.tool(read_only=True)(_module_level_tool))
    path = write(
        tmp_path, '[tools."_module_level_tool"]\nbackend = "process"\nmemory_limit_mb = 256\n'
    )
    ex = from_config(made, registry, path)
    t = ex.registry.get("_module_level_tool")
    assert t is not None and (t.backend, t.memory_limit_mb) == ("process", 256)
    # Without the process backend the limit cannot be enforced: refused, naming the table.
    write(tmp_path, '[tools."_module_level_tool"]\nmemory_limit_mb = 256\n')
    with pytest.raises(ConfigError, match=r'tools\."_module_level_tool": .*memory_limit_mb'):
        Executor.from_config(registry, tmp_path / "toolbus.toml")


def _module_level_tool(text: str) -> str:
    return text


def test_overrides_win_over_the_file(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor]
) -> None:
    seen: list[str] = []
    policy = RetryPolicy(max_retries=5)
    path = write(tmp_path, "max_parallel = 4\ntimeout = 10\nretries = 1\n")
    ex = from_config(
        made, registry, path, max_parallel=2, retry=policy, pre_call=[lambda c: seen.append(c.name)]
    )
    assert (ex.parallel_limit, ex.timeout, ex.retry_policy) == (2, 10, policy)
    ex.execute(ToolCall(name="search", arguments={"query": "q"}))
    assert seen == ["search"]


def test_executor_options_of_every_kind(tmp_path: Path, made: list[Executor]) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True, groups=["db"])
    def query(sql: str) -> str:
        return sql

    (tmp_path / "state").mkdir()
    path = write(
        tmp_path,
        """
timeout = inf
max_argument_bytes = 1000
max_abandoned_workers = 10
max_abandoned_per_tool = 3
hook_grace = 1.5
backend = "thread"
groups = { db = 2 }
journal = "state/journal.sqlite"
journal_retention = { days = 7 }
journal_timeout = 2
""",
    )
    config = load_config(path)
    assert config.options["journal"] == tmp_path / "state" / "journal.sqlite"
    ex = from_config(made, registry, path)
    assert ex.timeout is None  # inf: no deadline
    assert ex._groups == {"db": 2}
    assert (tmp_path / "state" / "journal.sqlite").exists()  # relative to the file
    assert ex.execute(ToolCall(name="query", arguments={"sql": "x"})).status == "ok"


def test_call_timeouts_from_the_file(tmp_path: Path, made: list[Executor]) -> None:
    from toolbus import ToolContext

    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def clock(ctx: ToolContext) -> float | None:
        return ctx.remaining

    path = write(
        tmp_path,
        """
timeout = 30
call_timeout = 20

[tools."clock"]
call_timeout = 4
""",
    )
    ex = from_config(made, registry, path)
    assert ex.call_timeout == 20
    assert ex.registry.get("clock").call_timeout == 4  # type: ignore[union-attr]
    left = ex.execute(ToolCall(name="clock")).output
    assert 0 < left <= 4  # the tightest: the tool's
    unbounded = from_config(made, registry, write(tmp_path, "call_timeout = inf\n"))
    assert unbounded.call_timeout is None
    with pytest.raises(ConfigError, match="call_timeout"):
        load_config(write(tmp_path, "call_timeout = -1\n"))
    # A tool's inf is no bound of its own, not no deadline (TOML has no None).
    with pytest.raises(ConfigError) as tools_own:
        load_config(write(tmp_path, '[tools."clock"]\ncall_timeout = 0\n'))
    assert "(inf: no bound of its own; the executor's call_timeout still applies)" in str(
        tools_own.value
    )


def test_backpressure_from_the_file(tmp_path: Path, made: list[Executor]) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True, groups=["db"])
    def query(sql: str) -> str:
        return sql

    @registry.tool(read_only=True, groups=["cache"])
    def lookup(key: str) -> str:
        return key

    path = write(
        tmp_path,
        """
max_queued = 50
on_full = "wait"

[groups]
db = { limit = 4, max_queued = 100 }
cache = 2
""",
    )
    config = load_config(path)
    assert config.options["groups"] == {"db": {"limit": 4, "max_queued": 100}, "cache": 2}
    ex = from_config(made, registry, path)
    assert ex._groups == {"db": 4, "cache": 2} and ex._group_queues == {"db": 100}
    assert ex._scheduler.slots.max_queued == 50 and ex._waits_for_room
    assert ex._scheduler.groups["db"].max_queued == 100
    assert ex.execute(ToolCall(name="query", arguments={"sql": "x"})).status == "ok"
    # The overrides win, as for every option.
    plain = from_config(made, registry, path, on_full="reject", max_queued=None)
    assert plain._scheduler.slots.max_queued is None and not plain._waits_for_room


def test_found_without_a_path(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # No file: the executor of the overrides alone, on the caller's registry.
    assert find_config() is None
    assert load_config() == Config()
    plain = from_config(made, registry, max_parallel=3)
    assert plain.registry is registry and plain.parallel_limit == 3
    # A pyproject.toml without [tool.toolbus] is not a configuration.
    write(tmp_path, '[project]\nname = "x"\n', "pyproject.toml")
    assert find_config() is None
    write(
        tmp_path,
        '[tool.toolbus]\nmax_parallel = 5\n[tool.toolbus.tools."code_exec"]\nenabled = false\n',
        "pyproject.toml",
    )
    assert find_config() == Path("pyproject.toml")
    ex = from_config(made, registry)
    assert ex.parallel_limit == 5 and "code_exec" not in ex.registry
    # toolbus.toml comes first.
    write(tmp_path, "max_parallel = 6\n")
    assert find_config() == Path("toolbus.toml")
    assert from_config(made, registry).parallel_limit == 6
    # A directory is looked in the same way; given, it must hold a configuration.
    assert from_config(made, registry, tmp_path).parallel_limit == 6
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty: has no toolbus.toml, nor a pyproject.toml"):
        Executor.from_config(registry, tmp_path / "empty")


def test_pyproject_keys_are_named_from_tool_toolbus(tmp_path: Path, registry: ToolRegistry) -> None:
    path = write(tmp_path, '[tool.toolbus.tools."search"]\ntimeout = "abc"\n', "pyproject.toml")
    with pytest.raises(ConfigError) as caught:
        Executor.from_config(registry, path)
    assert str(caught.value).startswith(f'{path}: tool.toolbus.tools."search".timeout: must be ')
    write(tmp_path, '[project]\nname = "x"\n', "pyproject.toml")
    with pytest.raises(ConfigError, match=r"has no \[tool.toolbus\] table"):
        Executor.from_config(registry, path)


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (
            '[tools."search"]\ntimeout = "abc"',
            'tools."search".timeout',
            "must be a number of seconds (inf for no deadline), got str 'abc'",
        ),
        (
            '[tools."search"]\ntimeout = -1',
            'tools."search".timeout',
            "must be > 0 (inf for no deadline), got -1",
        ),
        ('[tools."search"]\nretries = -1', 'tools."search".retries', "must be >= 0, got -1"),
        (
            '[tools."search"]\nenabled = "no"',
            'tools."search".enabled',
            "must be true or false, got str 'no'",
        ),
        (
            '[tools."search"]\nmemory_limit_mb = 1',
            'tools."search".memory_limit_mb',
            "must be between 16 and",
        ),
        (
            '[tools."search"]\ncache_ttl = 0',
            'tools."search".cache_ttl',
            "must be > 0 and finite, got 0",
        ),
        (
            '[tools."search"]\nrate_limit = 10',
            'tools."search".rate_limit',
            'must be a string such as "10/minute"',
        ),
        (
            '[tools."search"]\nrate_limit = "often"',
            'tools."search".rate_limit',
            "expected 'N/unit', got 'often'",
        ),
        (
            '[tools."search"]\nbackend = "loop"',
            'tools."search"',
            "tool 'search' is sync: backend='loop' would block",
        ),
        ('[tools."search"]\nbackend = "gpu"', 'tools."search"', "unknown backend 'gpu'"),
        ('[tools."search"]\nbackend = "no good"', 'tools."search".backend', "is not a valid name"),
        (
            '[tools."search"]\nmax_concurency = 1',
            'tools."search".max_concurency',
            "unknown key (known: enabled, timeout",
        ),
        ('[tools."search"]\nretry = 1', 'tools."search".retry', "write retries = N"),
        (
            '[tools."serch"]\ntimeout = 1',
            'tools."serch"',
            "the registry has no tool named 'serch'; did you mean 'search'?",
        ),
        ("tools = 1", "tools", "must be a table"),
        ("[tools]\nsearch = 1", 'tools."search"', "must be a table, got int 1"),
        ("max_parallel = 0", "max_parallel", "must be >= 1, got 0"),
        ("max_parallel = true", "max_parallel", "must be an integer, got bool True"),
        ("timeout = nan", "timeout", "got NaN"),
        ("hook_grace = inf", "hook_grace", "must be > 0 and finite"),
        ("retries = 1.5", "retries", "must be an integer"),
        ("max_paralel = 3", "max_paralel", "unknown key; did you mean 'max_parallel'?"),
        ("[search]\ntimeout = 1", "search", 'a tool\'s table is [tools."search"]'),
        ("hooks = 1", "hooks", "not settable from the file: hooks are Python callables"),
        ("retry = 3", "retry", "write retries = N"),
        ('backend = "gpu"', "backend", "unknown backend 'gpu'; known: auto, loop, process, thread"),
        ("backend = 1", "backend", "must be a backend's name, got int 1"),
        ('secret_keys = "token"', "secret_keys", "must be an array of names"),
        ('secret_keys = ["--"]', "secret_keys", "'--' has no letters or digits to match"),
        ("groups = { db = 0 }", "groups", "groups['db'] must be >= 1, got 0"),
        (
            "groups = { db = { limit = 2, max_queue = 5 } }",
            "groups",
            "groups['db']: unknown key 'max_queue' (known: limit, max_queued)",
        ),
        ("groups = { db = { max_queued = 5 } }", "groups", "groups['db'] needs a limit"),
        (
            "groups = { db = { limit = 2, max_queued = 0 } }",
            "groups",
            "groups['db']['max_queued'] must be >= 1, got 0",
        ),
        (
            'groups = { db = { limit = "2" } }',
            "groups",
            "groups['db']['limit'] must be an integer, got str '2'",
        ),
        ("max_queued = 0", "max_queued", "must be >= 1, got 0"),
        ("max_queued = 2.5", "max_queued", "must be an integer, got float 2.5"),
        ('on_full = "block"', "on_full", 'must be "reject" or "wait", got \'block\''),
        ("on_full = true", "on_full", 'must be "reject" or "wait", got bool True'),
        (
            "groups = { other = 1 }",
            "groups",
            "tool 'search' belongs to the group 'db', which it does not set",
        ),
        ("journal = 3", "journal", "must be a path"),
        ("journal_retention = { days = -1 }", "journal_retention", "days must be > 0"),
        ("journal_retention = { weeks = 1 }", "journal_retention", "unknown key(s) 'weeks'"),
        ('name = ""', "name", "must be a non-empty string"),
        # Review 9: a path no journal can live at is the file's error, not an OSError.
        ('journal = "/"', "journal", "'/' is a directory, not a file"),
        ('journal = "no/such/dir/j.sqlite"', "journal", "does not exist"),
        ('journal = "toolbus.toml"', "journal", "is not a toolbus journal"),
    ],
)
def test_bad_keys_and_values_name_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, reason: str, fake_policies: list[FakePolicy]
) -> None:
    registry = make_registry()
    search = registry.get("search")
    assert search is not None
    search.groups = ("db",)  # for the groups cases (set before any executor binds it)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        Executor.from_config(registry, path)
    error = caught.value
    assert str(error).startswith(f"{path}: {key}: "), str(error)
    assert reason in error.reason, error.reason
    assert (error.path, error.key) == (str(path), key)
    assert isinstance(error, ValueError) and toolbus.ConfigError is ConfigError


def test_a_file_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    # Review 9: tomllib recurses per level; its RecursionError is the file's fault.
    path = write(tmp_path, "x = " + "[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="nest too deeply") as caught:
        Executor.from_config(ToolRegistry(), path)
    assert caught.value.path == str(path)


def test_the_journal_the_file_names_closes_with_the_executor(
    tmp_path: Path, registry: ToolRegistry
) -> None:
    path = write(tmp_path, 'journal = "j.sqlite"\njournal_retention = { rows = 10 }\n')
    ex = Executor.from_config(registry, path)
    journal = ex.journal
    assert journal is not None and journal.retention.rows == 10
    ex.close()
    assert journal.closed  # the executor made it (from the file's path): it closes it
    # A constructor that fails after the journal was opened closes it too.
    with pytest.raises(ValueError, match="max_parallel"):
        Executor.from_config(registry, path, max_parallel=0)
    again = Executor.from_config(registry, path)  # not held open by the failed one
    again.close()


def test_the_brief_example_message(
    tmp_path: Path, registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '[tools."search"]\ntimeout = "abc"\n')
    with pytest.raises(ConfigError) as caught:
        Executor.from_config(registry)
    assert str(caught.value) == (
        'toolbus.toml: tools."search".timeout: must be a number of seconds '
        "(inf for no deadline), got str 'abc'"
    )


def test_every_executor_option_is_settable_or_refused_as_code_only(
    tmp_path: Path, registry: ToolRegistry
) -> None:
    settable = {option for option, _ in EXECUTOR_KEYS.values()}
    for name in inspect.signature(Executor.__init__).parameters:
        if name in ("self", "registry") or name in settable:
            continue
        path = write(tmp_path, f"{name} = 1\n")
        with pytest.raises(ConfigError) as caught:
            Executor.from_config(registry, path)
        assert "not settable from the file" in caught.value.reason, name
        assert f"{name}=" in caught.value.reason, name


def test_the_file_as_a_whole(tmp_path: Path, registry: ToolRegistry) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: no such file"):
        Executor.from_config(registry, tmp_path / "missing.toml")
    path = write(tmp_path, "max_parallel = [\n")
    with pytest.raises(ConfigError, match=r"toolbus\.toml: not valid TOML: "):
        Executor.from_config(registry, path)
    write(tmp_path, "[tool.toolbus]\nmax_parallel = 2\n")
    with pytest.raises(
        ConfigError, match=r"tool: unknown key \(a toolbus.toml has its keys at the top level"
    ):
        Executor.from_config(registry, path)


def test_a_policy_that_refuses_the_tool(
    tmp_path: Path, registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache refuses a mutating tool when given to it (its `check`): the tool's
    # option checks run again on the executor's copy.
    class Cache(BasePolicy):
        def __init__(self, *, ttl: float) -> None:
            self.ttl = ttl

        def check(self, tool: Tool) -> None:
            if not tool.read_only:
                raise ValueError(f"tool {tool.name!r}: a cache needs a read-only tool")

    monkeypatch.setattr(toolbus.policies, "cache", Cache, raising=False)
    path = write(tmp_path, '[tools."code_exec"]\ncache_ttl = 60\n')
    with pytest.raises(ConfigError) as caught:
        Executor.from_config(registry, path)
    assert str(caught.value) == f'{path}: tools."code_exec": a cache needs a read-only tool'


def test_a_policy_missing_from_this_build(
    tmp_path: Path, registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(toolbus.policies, "rate_limit", raising=False)
    path = write(tmp_path, '[tools."search"]\nrate_limit = "1/second"\n')
    with pytest.raises(ConfigError, match=r"toolbus\.policies\.rate_limit is not available"):
        Executor.from_config(registry, path)


def test_configured_policies_guard_the_calls(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor], fake_policies: list[FakePolicy]
) -> None:
    path = write(tmp_path, '[tools."search"]\nrate_limit = "1/second"\n')
    ex = from_config(made, registry, path)
    policy = fake_policies[-1]
    policy.reject = True
    result = ex.execute(ToolCall(name="search", arguments={"query": "q"}))
    assert (result.status, result.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert "refused by rate_limit" in (result.error or "")
    # The caller's tool has no such policy: an executor made in code runs it.
    with Executor(registry) as plain:
        assert plain.execute(ToolCall(name="search", arguments={"query": "q"})).status == "ok"


def test_backend_names_bound_in_code(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor]
) -> None:
    path = write(tmp_path, 'backend = "gpu"\n[tools."search"]\nbackend = "gpu"\n')
    ex = from_config(made, registry, path, backends={"gpu": ThreadBackend()})
    assert ex.execute(ToolCall(name="search", arguments={"query": "q"})).status == "ok"


def test_apply_config_is_the_second_step(tmp_path: Path, registry: ToolRegistry) -> None:
    config = load_config(write(tmp_path, 'timeout = 3\n[tools."code_exec"]\nenabled = false\n'))
    view, options = apply_config(config, registry, {"max_parallel": 2})
    assert options == {"timeout": 3, "max_parallel": 2}
    assert view.names() == ["search", "market_data"] and len(registry) == 3


def test_config_error_pickles() -> None:
    error = ConfigError("toolbus.toml", "timeout", "must be > 0")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.path, copy.key, copy.reason) == (
        "toolbus.toml: timeout: must be > 0",
        "toolbus.toml",
        "timeout",
        "must be > 0",
    )


def test_tools_a_configured_policy_brings_join_the_executors_registry(
    tmp_path: Path, registry: ToolRegistry, made: list[Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    helper = toolbus.FunctionTool(lambda: "artifact", name="read_artifact", read_only=True)

    class Spill(BasePolicy):
        def __init__(self, *, ttl: float) -> None:
            self.ttl = ttl

        def tools(self) -> tuple[Tool, ...]:
            return (helper,)

    monkeypatch.setattr(toolbus.policies, "cache", Spill, raising=False)
    ex = from_config(made, registry, write(tmp_path, '[tools."search"]\ncache_ttl = 1\n'))
    assert ex.registry.names() == ["search", "market_data", "code_exec", "read_artifact"]
    assert "read_artifact" not in registry
    # A name taken in the registry: the file's fault, said so.
    registry.register(toolbus.FunctionTool(lambda: "mine", name="read_artifact"))
    with pytest.raises(ConfigError, match=r"tools: tool 'search': its policies bring a tool named"):
        Executor.from_config(registry, tmp_path / "toolbus.toml")


def test_the_example_in_docs_config_md(tmp_path: Path, fake_policies: list[FakePolicy]) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    example = next(b for b in docs.split("```toml\n")[1:] if b.startswith("# toolbus.toml"))
    path = write(tmp_path, example.split("```")[0])
    registry = ToolRegistry()
    for name in ("web_search", "market_data", "code_exec"):
        registry.register(toolbus.FunctionTool(lambda: "x", name=name, read_only=True))
    view, options = apply_config(load_config(path), registry, {})
    assert view.names() == ["web_search", "market_data"]
    assert options["journal"] == tmp_path / "state" / "agent-journal.sqlite"
    assert options["retry"] == RetryPolicy(max_retries=1)
    assert [p.factory for p in fake_policies] == ["rate_limit", "cache", "rate_limit"]


# -- a step of a composite tool is a call of the executor, configured as any -----------------


def step_registry(ran: list[str]) -> ToolRegistry:
    from toolbus.tools import sequence

    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def prep(src: str) -> str:
        return src

    @registry.tool
    def code_exec(src: str) -> str:
        ran.append(src)
        return "executed"

    registry.register(sequence("by_object", [prep, code_exec]))
    registry.register(sequence("by_name", [prep, "code_exec"]))
    return registry


@pytest.mark.parametrize("sequence_name", ["by_object", "by_name"])
def test_a_step_the_file_disables_is_refused(
    tmp_path: Path, made: list[Executor], sequence_name: str
) -> None:
    ran: list[str] = []
    path = write(tmp_path, '[tools."code_exec"]\nenabled = false\n')
    ex = from_config(made, step_registry(ran), path)
    r = ex.execute(ToolCall(id="s", name=sequence_name, arguments={"src": "rm -rf /"}))
    assert ran == []
    assert r.status == "error" and r.metadata["failed_step"] == 1, r
    assert "Step 1 ('code_exec')" in (r.error or "") and "TOOL_NOT_FOUND" in (r.error or "")


def test_a_step_runs_as_the_files_copy_of_its_tool(
    tmp_path: Path, made: list[Executor], fake_policies: list[FakePolicy]
) -> None:
    ran: list[str] = []
    registry = step_registry(ran)
    original = registry.get("code_exec")
    path = write(tmp_path, '[tools."code_exec"]\nrate_limit = "1/minute"\ntimeout = 7\n')
    ex = from_config(made, registry, path)
    (limit,) = fake_policies
    limit.reject = True  # the file's rate limit guards the step as it guards a call
    r = ex.execute(ToolCall(id="s", name="by_object", arguments={"src": "x"}))
    assert ran == [] and r.metadata["failed_step"] == 1, r
    assert "refused by rate_limit" in (r.error or "")
    limit.reject = False
    with toolbus.bus.Recorder("tool:executing", sender=ex) as rec:
        assert ex.execute(ToolCall(id="t", name="by_object", arguments={"src": "y"})).ok
        events = rec.wait_for("tool:executing", 3, timeout=5)  # t, t.0, t.1
    step = next(e for e in events if e.call_id == "t.1")
    assert step.timeout == 7  # the file's timeout, not the decorator's (none)
    assert ran == ["y"] and original is not None and original.timeout is None


def test_a_view_of_a_view_maps_the_original_tool_through_both(
    tmp_path: Path, made: list[Executor]
) -> None:
    ran: list[str] = []
    registry = step_registry(ran)
    first = from_config(made, registry, write(tmp_path, '[tools."code_exec"]\ntimeout = 5\n'))
    second = from_config(
        made, first.registry, write(tmp_path, '[tools."code_exec"]\nenabled = false\n', "b.toml")
    )
    original = registry.get("code_exec")
    assert original is not None
    assert first.registry._version_of(original) is first.registry.get("code_exec")
    assert second.registry._version_of(original) is None
    r = second.execute(ToolCall(id="s", name="by_object", arguments={"src": "x"}))
    assert r.status == "error" and ran == []


def test_settings_for_a_spilling_tool_and_its_read_artifact(
    tmp_path: Path, made: list[Executor]
) -> None:
    from toolbus.policies import spill

    registry = ToolRegistry()

    @registry.tool(read_only=True, policies=[spill(store=tmp_path / "store", max_chars=1000)])
    def big(n: int) -> str:
        return "x" * n

    path = write(tmp_path, '[tools."big"]\ntimeout = 5\n[tools."read_artifact"]\ntimeout = 1\n')
    ex = from_config(made, registry, path)
    reader = ex.registry.get("read_artifact")
    assert reader is not None and reader.timeout == 1  # the file's copy, not the brought one
    handle = ex.execute(ToolCall(name="big", arguments={"n": 5000})).metadata["artifact"]
    page = ex.execute(ToolCall(name="read_artifact", arguments={"handle": handle}))
    assert page.ok and page.output == "x" * 1000
    # Disabled, it stays out: the file's word, though the spill brings it.
    path = write(tmp_path, '[tools."read_artifact"]\nenabled = false\n', "off.toml")
    assert "read_artifact" not in from_config(made, registry, path).registry


def test_a_tool_disabled_in_the_config_does_not_run_as_a_step(tmp_path: Path) -> None:
    """A tool the config disabled (`enabled = false`) still ran as a sequence's step (review 9)."""
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool
    def code_exec(src: str) -> str:
        ran.append(src)
        return "executed"

    @reg.tool(read_only=True)
    def prep(src: str) -> str:
        return src

    reg.register(sequence("prep_and_run", [prep, code_exec]))
    path = tmp_path / "toolbus.toml"
    path.write_text('[tools."code_exec"]\nenabled = false  # disabled for security\n')
    with Executor.from_config(reg, path) as ex:
        assert ex.execute(ToolCall(name="code_exec", arguments={"src": "x"})).status == "rejected"
        ex.execute(ToolCall(name="prep_and_run", arguments={"src": "rm -rf /"}))
    assert ran == []  # ["rm -rf /"] today


def test_config_of_a_spilling_tool_and_read_artifact_together_is_accepted(tmp_path: Path) -> None:
    """Configuring a spilling tool and read_artifact together raised "already registered"
    (review 9)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[spill(store=tmp_path / "store", max_chars=1000)])
    def big(n: int) -> str:
        return "x" * n

    path = tmp_path / "toolbus.toml"
    path.write_text('[tools."big"]\ntimeout = 5\n[tools."read_artifact"]\ntimeout = 1\n')
    Executor.from_config(reg, path).close()  # ConfigError today: read_artifact "already registered"


@pytest.mark.parametrize(
    "body", ['journal = "/"', "x = " + "[" * 2000 + "]" * 2000], ids=["journal-dir", "deep"]
)
def test_config_errors_are_config_errors(tmp_path: Path, body: str) -> None:
    """A journal path that is a directory, or a deeply nested file, raised other errors than
    ConfigError (review 9)."""
    path = tmp_path / "toolbus.toml"
    path.write_text(body)
    with pytest.raises(ConfigError):  # IsADirectoryError / RecursionError today
        Executor.from_config(ToolRegistry(), path).close()


def test_files_toolbus_cannot_read_are_config_errors(tmp_path: Path) -> None:
    latin = tmp_path / "toolbus.toml"
    latin.write_bytes('name = "agent-m\xfcnchen"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8") as raised:
        Executor.from_config(ToolRegistry(), latin)
    assert str(latin) in str(raised.value)
    with pytest.raises(ConfigError, match="not a regular file"):
        Executor.from_config(ToolRegistry(), "/dev/null")


def test_journal_options_without_a_journal_path_name_the_file_and_key(tmp_path: Path) -> None:
    from toolbus.journal import Journal

    file = tmp_path / "toolbus.toml"
    file.write_text("journal_retention = { days = 30 }\n")
    with pytest.raises(ConfigError, match="journal_retention: needs a journal") as raised:
        Executor.from_config(ToolRegistry(), file)
    assert str(file) in str(raised.value)
    file.write_text("journal_timeout = 5\n")
    with pytest.raises(ConfigError, match="journal_timeout: needs a journal"):
        Executor.from_config(ToolRegistry(), file)
    file.write_text('journal = "j.sqlite"\njournal_retention = { days = 30 }\n')
    own = Journal(tmp_path / "own.sqlite", create=True)
    try:
        with pytest.raises(ConfigError, match="journal_retention: applies to a journal made"):
            Executor.from_config(ToolRegistry(), file, journal=own)
    finally:
        own.close()
