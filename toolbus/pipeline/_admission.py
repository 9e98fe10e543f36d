"""Admission: a call made ready for its first attempt (size, JSON, injected
values, pre-call hooks, masking, authorization, validation), or why it is
rejected."""

from __future__ import annotations

import enum
from typing import Any, Final, Literal

import orjson

from .._json import detached
from .._json import dumps as json_dumps
from ..masking import (
    DEFAULT_SECRET_KEYS,
    EMPTY_SCRUBBER,
    has_secret,
    mask_arguments,
)
from ..models import ErrorCode, ToolCall, ToolResult, idempotency_key_problem
from ..scanning import describe
from ..tools import (
    ArgumentError,
    error_text,
    parse_json_arguments,
)
from ..tools._schemas import TOO_DEEP
from ._make import awaitable, log_contained, make_result, parsed_call
from ._masked_arguments import mask, published, sent_secrets, unmasked
from ._run import ADMISSION, Run
from ._services import (
    HOOK_FAILURES,
    Services,
    Steps,
    log,
)

# -- admission ------------------------------------------------------------------


def _reject(run: Run, code: ErrorCode, message: str) -> ToolResult:
    return make_result(run, "rejected", error=message, code=code, attempts=0)


def _argument_size(args: dict[str, Any] | str, limit: int) -> int:
    """The size of text arguments, or of a mapping as JSON where orjson alone
    refused it (`admit` asks orjson first: a huge integer, a subclass)."""
    if isinstance(args, str):
        # (`surrogatepass`: a text that is not valid UTF-8 is sized, then
        # rejected as not JSON, as a short one is)
        return len(args) if len(args) * 4 <= limit else len(args.encode("utf-8", "surrogatepass"))
    return len(json_dumps(args, option=orjson.OPT_NON_STR_KEYS))


class _Plain(enum.Enum):
    NOT = "not plain"


# What `admit_plain` answers for a call it does not admit: `admit`'s.
NOT_PLAIN: Final = _Plain.NOT


def admit_plain(run: Run, svc: Services) -> ToolResult | Literal[_Plain.NOT] | None:
    """`admit` with no generator where nothing on the way yields (no hook, no
    masker and no injected values of the user's), no value is secret by its
    tool's schema and no content scanner looks: the common call. Else
    `NOT_PLAIN`, and `admit` admits it."""
    tool = run.tool
    if (
        not svc.plain_admission
        or tool is None
        or tool.injected
        or tool.secret_paths
        or run.scrubber.scanner is not None
    ):
        return NOT_PLAIN
    run.phase = ADMISSION
    rejected = _checked(run, svc)
    if rejected is not None:
        return rejected
    call = run.call
    raw = call.arguments
    try:  # `mask`'s, as the default masker does it
        keys = svc.secret_keys or DEFAULT_SECRET_KEYS
        # (a nested call's caller's secrets: see `mask`)
        known = run.scrubber.known() if run.parent is not None and run.scrubber.values else None
        if has_secret(raw, keys.is_secret):
            run.masked = published(run, raw, mask_arguments(raw, keys)[0], [])
        else:
            run.masked = detached(raw)  # (a copy: see `published`)
        if known is not None:
            run.masked = known.value(run.masked)
    except Exception as e:
        unmasked(run, raw, (), e)
    return _validated(run, call)


def admit(run: Run, svc: Services) -> Steps:
    """Prepare a call for its first attempt; return why it is rejected, or None."""
    run.phase = ADMISSION
    tool = run.tool
    assert tool is not None
    rejected = _checked(run, svc)
    if rejected is not None:
        return rejected
    call = run.call
    if tool.injected:
        injected = yield from _inject(run, call, svc)
        if isinstance(injected, ToolResult):
            return injected
        call = run.call = injected
    if svc.plain_admission:  # no pre-call hook to run (the common executor)
        new = call
    else:
        # What the call hides as the model sent it stays hidden, wherever a
        # hook moves it (`mask` scrubs it from what is shown). Read before
        # the hooks run: one may change the arguments in place.
        sent = sent_secrets(call, tool, svc)
        if sent is not EMPTY_SCRUBBER:
            run.scrubber = run.scrubber.merged(sent)
        refused = yield from _pre_call(run, call, svc)
        if isinstance(refused, ToolResult):
            return refused
        new = refused
    run.call = new
    blocked = yield from mask(run, new, svc)
    if blocked is not None:
        return _reject(
            run,
            ErrorCode.CONTENT_BLOCKED,
            f"Tool '{new.name}' was not called: its arguments hold {describe(blocked)}, "
            "which this executor's content scanner blocks",
        )
    if tool.injected_required and isinstance(new.arguments, dict):
        args = new.arguments
        missing = [n for n in tool.injected if n in tool.injected_required and n not in args]
        if missing:
            names = ", ".join(f"'{n}'" for n in missing)
            return _reject(
                run,
                ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{new.name}' is unavailable: nothing supplied its injected parameter "
                f"{names} (Executor(inject=...) or a pre-call hook does)",
            )
    if not svc.plain_admission:
        try:
            # An async authorizer is awaited: its coroutine object is not a yes.
            # Only True admits: None, "False", 1, {"allowed": False} refuse.
            allowed = svc.hooks.is_allowed(new)
            if awaitable(allowed):
                allowed = yield allowed
        except HOOK_FAILURES as e:  # a hook's own, too
            log_contained(f"authorization failed for call {new.id}", e, run.scrubber)
            return _reject(run, ErrorCode.TOOL_NOT_ALLOWED, error_text(e))
        if allowed is not True:
            return _reject(run, ErrorCode.TOOL_NOT_ALLOWED, _refusal(new.name, allowed))
    return _validated(run, new)


def _checked(run: Run, svc: Services) -> ToolResult | None:
    """Check the call's idempotency key and its arguments' size, and parse
    text arguments for a function tool (`run.call` then holds the parsed
    call); return why it is rejected, or None."""
    tool = run.tool
    assert tool is not None
    call = run.call
    key = run.origin.idempotency_key
    if key is not None:
        # A ToolCall checks its key when made; a mapping's (or a model_construct
        # one's) comes here unchecked, and is answered, not run under another.
        problem = idempotency_key_problem(key)
        if problem is not None:
            return _reject(run, ErrorCode.INVALID_ARGUMENTS, f"Invalid call: {problem}")
    args: dict[str, Any] | str = call.arguments
    limit = svc.max_argument_bytes
    try:
        if type(args) is dict and args:
            try:  # orjson itself: `_argument_size`'s frame only for text and what it refuses
                size = len(orjson.dumps(args, option=orjson.OPT_NON_STR_KEYS))
            except orjson.JSONEncodeError:
                size = _argument_size(args, limit)
        else:
            size = _argument_size(args, limit) if args else 2
    except TypeError as e:
        return _reject(
            run, ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments for '{call.name}': {_not_json(e)}"
        )
    if size > limit:
        return _reject(
            run,
            ErrorCode.INVALID_ARGUMENTS,
            f"Arguments for '{call.name}' are {size} bytes; the limit is {limit} bytes",
        )
    if tool.type == "function" and isinstance(args, str):
        try:
            call = parsed_call(call, parse_json_arguments(args))
        except ArgumentError as e:
            return _reject(
                run, ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments for '{call.name}': {e}"
            )
        run.call = call
    return None


def _not_json(e: TypeError) -> str:
    """Why arguments JSON cannot write are refused, as the model reads it."""
    if "Recursion limit" in str(e):
        # orjson's words for nesting past its limit: they are JSON, only too
        # deep (and refused in the same words when they come as text).
        return TOO_DEEP
    return f"Arguments are not JSON: {e}"


def _validated(run: Run, call: ToolCall) -> ToolResult | None:
    """Validate `call`'s arguments into the tool's parameters (`run.params`),
    the call now admitted; return why they are rejected, or None."""
    tool = run.tool
    assert tool is not None
    try:
        args = call.arguments
        run.params = (
            tool.validate(args) if tool.validates_dicts and type(args) is dict else tool.parse(args)
        )
    except ArgumentError as e:
        return _reject(run, ErrorCode.INVALID_ARGUMENTS, str(e))
    except Exception as e:
        return _reject(
            run,
            ErrorCode.INVALID_ARGUMENTS,
            f"Invalid arguments for '{call.name}': {error_text(e)}",
        )
    run.admitted = True
    return None


def _refusal(tool: str, allowed: Any) -> str:
    """Why authorization refused a call: it said False, or (failing closed)
    anything but True, which is logged as the mistake it is."""
    if allowed is False:
        return f"Tool '{tool}' is not allowed"
    why = f"authorize returned {type(allowed).__name__}, not True/False: the call is refused"
    # The type alone: the value may be anything, a secret among it.
    log.warning("call of '%s' refused: %s", tool, why)
    return f"Tool '{tool}' is not allowed: {why}"


def _inject(run: Run, call: ToolCall, svc: Services) -> Steps:
    """Refuse a model-supplied value for an injected parameter (on the arguments
    as the model sent them) and fill the injected values `Executor(inject=...)`
    supplies. Returns the call with them, or why it is rejected."""
    tool = run.tool
    assert tool is not None
    args = call.arguments
    if not isinstance(args, dict):
        return call  # unparseable: validation says so
    given = [n for n in tool.injected_names if n in args]
    if given:
        names = ", ".join(f"'{n}'" for n in given)
        return _reject(
            run,
            ErrorCode.INVALID_ARGUMENTS,
            f"Invalid arguments for '{call.name}': {names} cannot be set by the model "
            "(the application supplies it); leave it out",
        )
    providers = svc.inject
    if not providers:
        return call
    values: dict[str, Any] = {}
    for name in tool.injected:
        fn = providers.get(f"{call.name}.{name}") or providers.get(name)
        if fn is None:
            continue
        try:
            value = fn(call)
            if awaitable(value):
                value = yield value
        except HOOK_FAILURES as e:  # the provider's own, too
            # Refused like a pre-call hook that raises; whatever was supplied
            # so far is masked (and scrubbed from the message) first.
            yield from mask(run, call.with_arguments({**args, **values}), svc)
            log.info(
                "injecting '%s' failed for call %s: %s",
                name,
                call.id,
                run.scrubber.text(error_text(e)),
            )
            return _reject(
                run,
                ErrorCode.TOOL_NOT_ALLOWED,
                run.scrubber.for_model().text(f"Could not supply '{name}': {error_text(e)}"),
            )
        values[name] = value
    return call.with_arguments({**args, **values}) if values else call


def _pre_call(run: Run, call: ToolCall, svc: Services) -> Steps:
    """`call` through the pre-call hooks: the call they return (its id kept),
    or the rejection of a hook that raised, returned no call or renamed the tool."""
    try:
        new = svc.hooks.pre_execute(call)
        if awaitable(new):
            new = yield new
        if not isinstance(new, ToolCall):
            raise TypeError(f"pre-call hook returned {type(new).__name__}, not a ToolCall")
    except HOOK_FAILURES as e:  # a hook's own, too
        # Raising is the documented way for a hook to refuse a call: logged
        # without a traceback, it is not a fault.
        yield from mask(run, call, svc)
        log.info("pre-call hook rejected call %s: %s", call.id, run.scrubber.text(error_text(e)))
        return _reject(run, ErrorCode.TOOL_NOT_ALLOWED, error_text(e))
    if new.name != call.name:
        yield from mask(run, call, svc)
        return _reject(
            run,
            ErrorCode.TOOL_NOT_ALLOWED,
            f"a pre-call hook renamed '{call.name}' to '{new.name}'; calls cannot change tools",
        )
    if new.id != call.id:
        new = ToolCall.model_construct(id=call.id, name=new.name, arguments=new.arguments)
    return new
