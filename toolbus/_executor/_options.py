"""The executor's keyword options checked, before anything of it starts.

A bad option is a `TypeError` or `ValueError` naming it (see `Executor`'s
docstring for what each accepts). `check_options` checks the scalar ones;
`check_wiring` what the calls run with (capacity groups, policies, injected
values, backends): it registers the tools the policies bring, and holds the
registry's tools to the backends and groups, so a pairing that cannot work
fails at construction, not at a call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._options import (
    check_on_full,
    positive_int,
    positive_number,
    real_number,
    timeout_seconds,
)
from ..backends import Backend, Backends
from ..masking import DEFAULT_SECRET_KEYS, SecretKeys
from ..models import ToolCall
from ..policies import Policy
from ..policies._set import PolicySet
from ..retry import RetryPolicy
from ..scanning import ContentScanner
from ..tools import Tool, ToolRegistry
from ..tools._brought import brought_tools

__all__ = [
    "GroupsOption",
    "Options",
    "Wiring",
    "add_policy_tools",
    "call_budget",
    "check_groups",
    "check_inject",
    "check_options",
    "check_tools",
    "check_wiring",
    "learn_groups",
]


@dataclass(frozen=True, slots=True)
class Options:
    """`Executor(...)`'s scalar options, checked."""

    max_parallel: int
    timeout: float | None  # None: no deadline (`math.inf` is taken as None)
    hook_grace: float
    max_argument_bytes: int
    max_abandoned_workers: int
    max_abandoned_per_tool: int  # given, or half of max_abandoned_workers
    secret_keys: SecretKeys  # the default matcher itself when no names are added
    worker_idle_timeout: float = 60.0  # seconds before an idle worker thread or process ends
    max_queued: int | None = None  # calls waiting for a slot of max_parallel (None: no bound)
    on_full: str = "reject"  # or "wait": a sync producer waits for room (_backpressure.py)
    call_timeout: float | None = None  # the whole call's budget (None: none)
    scanner: ContentScanner | None = None  # scans what is published (None: nothing)


def check_options(
    *,
    name: str | None,
    max_parallel: int,
    timeout: float | None,
    retry: RetryPolicy | None,
    masker: Callable[[ToolCall], Any] | None,
    max_argument_bytes: int,
    max_abandoned_workers: int,
    max_abandoned_per_tool: int | None,
    hook_grace: float,
    secret_keys: Iterable[str],
    worker_idle_timeout: float = 60.0,
    max_queued: int | None = None,
    on_full: str = "reject",
    call_timeout: float | None = None,
    scanner: ContentScanner | None = None,
) -> Options:
    """The scalar options checked, in this order (the first bad one raises)."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise TypeError(f"Executor: name must be a non-empty string, got {name!r}")
    max_parallel = positive_int(max_parallel, "max_parallel", "Executor")
    timeout = timeout_seconds(timeout, "timeout", "Executor")
    timeout = None if timeout == math.inf else timeout
    call_timeout = call_budget(call_timeout, "Executor")
    hook_grace = positive_number(hook_grace, "hook_grace", "Executor")
    worker_idle_timeout = positive_number(worker_idle_timeout, "worker_idle_timeout", "Executor")
    max_argument_bytes = positive_int(max_argument_bytes, "max_argument_bytes", "Executor")
    max_abandoned_workers = positive_int(max_abandoned_workers, "max_abandoned_workers", "Executor")
    if max_abandoned_per_tool is not None:
        max_abandoned_per_tool = positive_int(
            max_abandoned_per_tool, "max_abandoned_per_tool", "Executor"
        )
    if max_queued is not None:
        max_queued = positive_int(max_queued, "max_queued", "Executor")
    on_full = check_on_full(on_full, "on_full", "Executor")
    if scanner is not None and not isinstance(scanner, ContentScanner):
        raise TypeError(
            "Executor: scanner must be a toolbus.scanning.ContentScanner, "
            f"got {type(scanner).__name__}"
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"Executor: retry must be a RetryPolicy, got {type(retry).__name__}")
    keys = SecretKeys(secret_keys)
    if keys.extra and masker is not None:
        raise ValueError(
            "Executor: secret_keys extends the default masking, which masker= replaces; "
            "mask those keys in your masker (masking.mask_arguments(args, SecretKeys([...])))"
        )
    if max_abandoned_per_tool is None:
        # One stuck tool may take half the budget: the rest stays for the others.
        max_abandoned_per_tool = max(1, max_abandoned_workers // 2)
    return Options(
        max_parallel=max_parallel,
        timeout=timeout,
        hook_grace=hook_grace,
        max_argument_bytes=max_argument_bytes,
        max_abandoned_workers=max_abandoned_workers,
        max_abandoned_per_tool=max_abandoned_per_tool,
        # Without extra names, share the default matcher and its warm cache.
        secret_keys=keys if keys.extra else DEFAULT_SECRET_KEYS,
        worker_idle_timeout=worker_idle_timeout,
        max_queued=max_queued,
        on_full=on_full,
        call_timeout=call_timeout,
        scanner=scanner,
    )


def check_hooks(
    pre_call: Any, post_call: Any, authorize: Any, masker: Any, concurrency: Any, publisher: Any
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The hook options checked when the executor is made: a function where a
    function is asked for (a `None` or a string given for one would otherwise
    fail every call, and a post-call hook only after its tool ran); the
    pre-call and post-call hooks as tuples."""
    hooks: list[tuple[Any, ...]] = []
    for option, given in (("pre_call", pre_call), ("post_call", post_call)):
        if callable(given) or isinstance(given, str | bytes):
            raise TypeError(f"Executor: {option} must be a list of functions, got {given!r}")
        try:
            listed = tuple(given)
        except TypeError:
            raise TypeError(
                f"Executor: {option} must be a list of functions, got {type(given).__name__}"
            ) from None
        for i, hook in enumerate(listed):
            if not callable(hook):
                raise TypeError(
                    f"Executor: {option}[{i}] must be callable, got {type(hook).__name__}"
                )
        hooks.append(listed)
    for option, given in (
        ("authorize", authorize), ("masker", masker), ("concurrency", concurrency)
    ):  # fmt: skip
        if given is not None and not callable(given):
            raise TypeError(f"Executor: {option} must be callable, got {type(given).__name__}")
    if publisher is not None and not (
        callable(getattr(publisher, "wants", None))
        and callable(getattr(publisher, "publish", None))
    ):
        raise TypeError(
            "Executor: publisher must have wants(name) and publish(name, event) methods "
            f"(toolbus.bus.Publisher), got {type(publisher).__name__}"
        )
    return hooks[0], hooks[1]


# The longest `close()` waits in all, whatever it is given (a day: a wait
# beyond what the platform's timed waits accept would raise instead).
_LONGEST_CLOSE = 86_400.0


def close_budget(value: object) -> float:
    """`close(timeout=)`: a number >= 0 (`math.inf` and anything huge: at
    most a day); else `TypeError`/`ValueError`."""
    seconds = real_number(value, "timeout", "Executor.close")
    if not seconds >= 0:
        raise ValueError(f"Executor.close: timeout must be >= 0, got {value!r}")
    return float(min(seconds, _LONGEST_CLOSE))


def call_budget(
    value: object, owner: str, option: str = "call_timeout", hint: str = ""
) -> float | None:
    """A whole-call budget (or a per-call `timeout`): None or `math.inf` (no
    bound: None), or a number of seconds > 0; else `TypeError`/`ValueError`
    (`hint`: what None means there, when not "no deadline")."""
    seconds = timeout_seconds(value, option, owner, hint=hint)
    return None if seconds == math.inf else seconds


class Wiring(NamedTuple):
    """What `check_wiring` checked (the executor keeps each as an attribute)."""

    groups: dict[str, int]  # each group's limit
    group_queues: dict[str, int]  # the bound on a group's queue, where one is set
    policies: PolicySet
    inject: dict[str, Callable[[ToolCall], Any]]
    backends: Backends


def check_wiring(
    registry: ToolRegistry,
    *,
    groups: GroupsOption | None,
    policies: Sequence[Policy],
    inject: Mapping[str, Callable[[ToolCall], Any]] | None,
    backend: str | Backend | None,
    backends: Mapping[str, Backend] | None,
    worker_idle_timeout: float = 60.0,
) -> Wiring:
    """`Executor(groups=, policies=, inject=, backend=, backends=)` checked, in
    that order; the tools the policies bring are registered into `registry`
    on the way, and every tool of it then checked (`check_tools`)."""
    checked_groups, group_queues = check_groups(groups)
    policy_set = PolicySet(policies)
    add_policy_tools(registry, policy_set)
    checked_inject = check_inject(inject, registry)
    resolved = Backends(backend, backends, idle_timeout=worker_idle_timeout)
    check_tools(registry.list(), resolved, checked_groups)
    return Wiring(checked_groups, group_queues, policy_set, checked_inject, resolved)


def add_policy_tools(registry: ToolRegistry, policies: PolicySet) -> None:
    """Register the tools the executor's policies bring (a spill's read_artifact);
    a policy whose `tools()` gives anything but tools is a TypeError."""
    for t in (x for p in policies.policies for x in brought_tools(p, "Executor")):
        known = registry.get(t.name)
        if known is t:
            continue
        if known is not None:
            raise ValueError(
                f"Executor: a policy brings a tool named {t.name!r}, and the registry "
                "has another tool by that name"
            )
        registry.register(t)


# `Executor(groups=...)`: a name to a limit (`{"db": 4}`), or to a table of
# `limit` and `max_queued` (`{"db": {"limit": 4, "max_queued": 100}}`).
GroupsOption = Mapping[str, int | Mapping[str, int | None]]
_GROUP_KEYS = ("limit", "max_queued")


_RESERVED_GROUPS = frozenset({"max_parallel", "threads"})


def check_groups(groups: GroupsOption | None) -> tuple[dict[str, int], dict[str, int]]:
    """Executor(groups=...): names to limits, each a positive int, or to tables
    `{"limit": N, "max_queued": M}` (`max_queued` optional, None: no bound).
    Returns each group's limit, and the bound on its queue where one is set."""
    if groups is None:
        return {}, {}
    if not isinstance(groups, Mapping):
        raise TypeError(f"Executor: groups must map names to limits, got {type(groups).__name__}")
    limits: dict[str, int] = {}
    queues: dict[str, int] = {}
    for name, spec in groups.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"Executor: group names must be non-empty strings, got {name!r}")
        if name in _RESERVED_GROUPS or name.startswith(("tool:", "batch:")):
            # The names its queues are reported under (stats().queues,
            # tool:queued, the Prometheus label): a group of these would be
            # counted as another queue.
            raise ValueError(
                f"Executor: groups[{name!r}]: a reserved name (max_parallel, threads, "
                "tool:<name> and batch:<id> name toolbus's own queues)"
            )
        where = f"groups[{name!r}]"
        if not isinstance(spec, Mapping):
            limits[name] = positive_int(spec, where, "Executor")
            continue
        unknown = [k for k in spec if k not in _GROUP_KEYS]
        if unknown:
            raise ValueError(
                f"Executor: {where}: unknown key {unknown[0]!r} (known: {', '.join(_GROUP_KEYS)})"
            )
        if "limit" not in spec:
            raise ValueError(f"Executor: {where} needs a limit: {{'limit': N, 'max_queued': M}}")
        limits[name] = positive_int(spec["limit"], f"{where}['limit']", "Executor")
        bound = spec.get("max_queued")
        if bound is not None:
            queues[name] = positive_int(bound, f"{where}['max_queued']", "Executor")
    return limits, queues


def learn_groups(groups: dict[str, int], tools: Sequence[Tool]) -> None:
    """Add to `groups` (Executor(groups=...), checked) the groups the tools define
    themselves (`Tool.group_limits`); two limits for one name are a `ValueError`."""
    defined_by = dict.fromkeys(groups, "Executor(groups=...)")
    for t in tools:
        for name, limit in t.group_limits.items():
            known = groups.get(name)
            if known is None:
                groups[name] = limit
                defined_by[name] = f"tool {t.name!r}"
            elif known != limit:
                raise ValueError(
                    f"tool {t.name!r} defines capacity group {name!r} with limit {limit}, "
                    f"and {defined_by[name]} with limit {known}"
                )


def check_tools(tools: Sequence[Tool], backends: Backends, groups: dict[str, int]) -> None:
    """Resolve every tool's backend and groups now (learning the groups the
    tools define into `groups`), so a pairing that cannot work fails here;
    tools registered later are checked on their first call (and refused with
    a result)."""
    learn_groups(groups, tools)
    for t in tools:
        backends.for_tool(t)
        for group in t.groups:
            if group not in groups:
                raise ValueError(
                    f"tool {t.name!r}: no capacity group named {group!r} "
                    f"(known: {', '.join(sorted(groups)) or 'none'})"
                )


def check_inject(
    inject: Mapping[str, Callable[[ToolCall], Any]] | None, registry: ToolRegistry
) -> dict[str, Callable[[ToolCall], Any]]:
    """Executor(inject=...): "param" or "tool.param" to a callable of the call.

    A "tool.param" key for a registered tool must name one of its injected
    parameters (a typo would otherwise leave the parameter without a value)."""
    if inject is None:
        return {}
    if not isinstance(inject, Mapping):
        raise TypeError(
            f"Executor: inject must map parameter names to callables, got {type(inject).__name__}"
        )
    checked: dict[str, Callable[[ToolCall], Any]] = {}
    for key, fn in inject.items():
        if not isinstance(key, str) or not key or key.endswith("."):
            raise TypeError(f"Executor: inject keys are 'param' or 'tool.param', got {key!r}")
        if not callable(fn):
            raise TypeError(f"Executor: inject[{key!r}] must be callable, got {type(fn).__name__}")
        if "." in key:
            tool_name, param = key.rsplit(".", 1)
            t = registry.get(tool_name)
            if t is not None and param not in t.injected:
                raise ValueError(
                    f"Executor: inject[{key!r}]: tool {tool_name!r} has no injected parameter "
                    f"{param!r} (injected: {', '.join(t.injected) or 'none'}; mark it "
                    "Annotated[..., Injected])"
                )
        checked[key] = fn
    return checked
