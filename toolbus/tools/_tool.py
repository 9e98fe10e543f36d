"""The `Tool` base class: a template method that validates, runs and contains.

A subclass sets `name`, `description`, a pydantic `Params` model (or a JSON
schema in `parameters`) and implements `run(self, params[, ctx])`, sync or async.
Schemas are built once, with the tool; the per-call path validates and calls.

One piece: the template method's steps (set-up, option checks, parse,
validate, invoke, contain) share what `_setup` derives once per tool, and a
subclass overrides single steps of it; pure schema checks: `_schemas.py`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

import jsonschema
from pydantic import BaseModel, ValidationError

from .. import _options, _seams
from .._errors import ArgumentError, ToolFailure, error_text
from .._options import (
    check_cpu_limit,
    check_memory_limit,
    own_bound,
    positive_int,
    timeout_seconds,
)
from .._output import normalize_output
from ..masking import SecretPath
from ..models import ErrorCode, ToolResult
from ..policies._protocol import check_policies
from ..retry import RetryPolicy
from ._context import ToolContext
from ._injected import injected_argument_names, injected_fields, without_properties
from ._names import check_provider_name, check_tool_name
from ._offer import IsEnabled, check_enabled, check_scopes
from ._running import run_to_completion
from ._schemas import (
    _check_utf8,
    arguments_problem,
    check_nesting,
    check_output_schema,
    format_validation_error,
    free_text_input,
    parameters_validator,
    parse_json_arguments,
)
from ._secrets import secret_paths

if TYPE_CHECKING:
    from ..backends import Backend

    # A backend, its name, or None for the executor's choice.
    BackendSpec: TypeAlias = str | Backend | None

__all__ = [
    "STANDARD_INVOKES",
    "Tool",
    "ToolType",
    "check_output_schema",
    "format_validation_error",
    "parse_json_arguments",
]

ToolType = Literal["function", "custom"]
# Whether an MCP client may (or must) call it as a task (`toolbus.mcp`'s server).
TaskSupport = Literal["forbidden", "optional", "required"]


# The fields a tool's argument schema comes from: fixed once it is set up.
# (Setting one raises; a `parameters` dict edited in place is not seen: what
# is masked was read from it at set-up. Make a new tool instead.)
_SCHEMA_FIELDS = frozenset({"parameters", "Params", "type"})
_MODEL_VALIDATE = BaseModel.model_validate.__func__  # type: ignore[attr-defined]


class Tool:
    """Base class of every tool toolbus can run.

    Class attributes (or instance attributes set in `__init__`) describe the
    tool; `run` does the work. `execute`/`aexecute` are the template method for
    use without an executor: they return a `ToolResult` for every outcome.

    Options are checked when the tool is made, with an error naming the tool
    and the option: `name` (whenever set) is 1 to 128 ASCII letters, digits,
    `_`, `-` or `.` (`_names.py`); `timeout` is None (the executor's applies), a
    number of seconds > 0, or `math.inf` (no deadline for this tool, whatever
    the executor's); `call_timeout` (the whole call's budget: waiting, every
    attempt and backoff) is None, a number of seconds > 0 or `math.inf`, and
    the tightest of the tool's, the executor's and the call's applies;
    `max_concurrency` is None or an integer >= 1; `retry` is None or a
    `RetryPolicy`. `bool`, text such as `"1"` and NaN are refused.
    `idempotent` and `open_world` are True or False; `destructive` is True,
    False or None (None: as mutating as the tool is, `not read_only`), and a
    read-only tool cannot be destructive. `parameters` is a valid JSON schema
    of an object; `output_schema` is None or a valid JSON schema, whenever set.

    `secret_paths` lists where the parameters schema marks a value secret
    (`SecretStr`/`SecretBytes`, `writeOnly: true`, `format: password`) and the
    injected parameters; the executor masks those values in everything it
    publishes, whatever their names and whatever masker it uses.

    `injected` names the parameters the model never sets (see
    `toolbus.Injected`): `schema` (what every export shows the model) leaves
    them out; the arguments are validated with them.
    """

    Params: ClassVar[type[BaseModel] | None] = None
    name: str = ""
    description: str = ""
    type: ToolType = "function"
    parameters: dict[str, Any] | None = None
    read_only: bool = False
    timeout: float | None = None
    # The whole call's budget (schedule-to-close), its waits and retries
    # included; the tightest of the tool's, the executor's and the call's wins.
    call_timeout: float | None = None
    retry: RetryPolicy | None = None
    max_concurrency: int | None = None
    # Where its attempts run: a `toolbus.backends.Backend`, a name ("auto",
    # "thread", "loop", or one bound by the executor), or None: the executor's.
    backend: BackendSpec = None
    # Named capacity groups it shares with other tools (Executor(groups=...)).
    groups: tuple[str, ...] = ()
    # Groups it defines itself, name -> limit (it belongs to each): an executor
    # learns them from the tool, so a limit that comes with the tool (an MCP
    # server's) needs no Executor(groups=...). Two limits for one name conflict.
    group_limits: Mapping[str, int] = MappingProxyType({})
    # Parameters whose values name what a call touches (a path, an id): in a
    # batch it then waits only for the calls touching the same (see scheduling.py).
    resource_keys: tuple[str, ...] = ()
    # Holds resources of this process (a live session, a socket): it cannot
    # be shipped to another process or machine.
    process_local: bool = False
    # Runs on another server (an MCP tool's): OpenTelemetry's `extension` tool type.
    extension: ClassVar[bool] = False
    # What a caller's OAuth token must grant to see and call it over MCP
    # (`toolbus.mcp`'s HTTP server with OAuth; see `_offer.py`).
    scopes: tuple[str, ...] = ()
    # Whether it is offered at a step of an agent run: True, False, or a
    # function of a `StepContext` (see `_offer.py`); a call of it when it is
    # not ends `TOOL_NOT_OFFERED`.
    is_enabled: IsEnabled = True
    # Never run by toolbus: its result comes from outside (a person, another
    # service); its call ends `deferred` with an `ExternalRequest`.
    external: bool = False
    # Served over MCP: whether a client may call it as a task that outlives its
    # request ("optional"), must ("required"), or may not ("forbidden").
    task_support: TaskSupport = "forbidden"
    # Safe to run again after a timeout or a crash even though it is mutating
    # (it dedupes on `ToolContext.idempotency_key`, say).
    idempotent: bool = False
    # For MCP clients (their `destructiveHint`, `openWorldHint`): whether a
    # mutating tool may destroy or overwrite (None: any mutating tool may), and
    # whether it reaches beyond a closed domain (the web, other systems).
    destructive: bool | None = None
    open_world: bool = True
    # The JSON schema of its output: a subclass may declare one; a function tool
    # gets it from its return annotation when pydantic can describe that type.
    output_schema: dict[str, Any] | None = None
    # Per-worker limits, enforced by a backend that runs tools in processes
    # (`backend="process"`): address space in MB, CPU seconds per call.
    memory_limit_mb: int | None = None
    cpu_limit_s: float | None = None
    # The tool applies its limits itself (a command tool, to its subprocess):
    # any backend may run it.
    applies_own_limits: bool = False
    # Its policies (`toolbus.policies`): asked, after the executor's, before
    # each call runs; each may refuse the tool here (a cache on a mutating tool).
    policies: tuple[Any, ...] = ()
    is_async: bool
    wants_context: bool
    secret_paths: tuple[SecretPath, ...] = ()
    # Parameters the model never sets (`Annotated[..., Injected]`, or named here
    # for a tool with a JSON schema): left out of `schema`, refused from the
    # model, supplied by `Executor(inject=...)` or a pre-call hook, always masked.
    injected: tuple[str, ...] = ()
    # Every argument name that reaches an injected parameter (aliases and the
    # Python names of `Params` fields too): a model that sends one is refused.
    injected_names: tuple[str, ...] = ()
    injected_required: frozenset[str] = frozenset()
    _schema: dict[str, Any]
    # Bumped by every attribute set on the tool: an executor's plan for it
    # (resolved timeout, backend, policies) is made for one version.
    _version: int = 0
    validates_dicts: bool = False
    # How deep arguments may nest, for `parameters` that refer to themselves.
    _nesting: int | None = None
    # Set once its set-up is done: its schema fields are fixed from then on.
    _derived: bool = False

    def __init__(self) -> None:
        self._setup()

    # -- set-up (once per tool) ------------------------------------------------

    def _setup(self) -> None:
        if not self.name:
            raise ValueError(f"{type(self).__name__} needs a name")
        if self.type not in ("function", "custom"):
            raise ValueError(f"unknown tool type {self.type!r}")
        self._check_options()
        self._schema_validator: jsonschema.protocols.Validator | None = None
        # `full`: what the arguments are validated against (injected values
        # included); `_schema`: what the model is shown (without them).
        if self.type == "function":
            if self.Params is not None:
                full = self.Params.model_json_schema()
            elif self.parameters is not None:
                # The very dict given is what the model is shown (`schema`), and
                # what its secret paths are read from once, here: it must not be
                # edited in place afterwards (see `_SCHEMA_FIELDS`).
                full = self.parameters
                checked = parameters_validator(full, f"tool {self.name!r}")
                self._schema_validator, self._nesting = checked
            else:
                full = {"type": "object", "properties": {}}
        else:
            full = {}
        self.injected = self._injected_names(full)
        self.injected_names = self._injected_argument_names() if self.injected else ()
        # Without a schema of its own, the tool reads its arguments itself.
        schema = self.Params is not None or self.parameters is not None
        properties = full.get("properties") if schema else None
        self.resource_keys = _options.check_resource_keys(
            self.resource_keys, f"tool {self.name!r}", free_text=self.type != "function",
            known=properties if isinstance(properties, dict) else None,
            injected=self.injected_names,
        )  # fmt: skip
        required = full.get("required")
        self.injected_required = frozenset(
            n for n in self.injected if isinstance(required, list) and n in required
        )
        self._schema = without_properties(full, self.injected) if self.injected else full
        # Injected values are masked whatever their names.
        typed = secret_paths(full)
        self.secret_paths = typed + tuple((n,) for n in self.injected_names if (n,) not in typed)
        self.is_async = inspect.iscoroutinefunction(self._target())
        # `parse` of a dict is `validate` unless a subclass parses its own way:
        # the executor then validates without the extra frame.
        self.validates_dicts = self.type == "function" and type(self).parse is Tool.parse
        self._wants_context = self._target_wants_context()
        # Whether a call must build a ToolContext: an `invoke` of toolbus's own
        # passes it only when `run` takes it; one of a subclass may read it.
        self.wants_context = self._wants_context or type(self).invoke not in STANDARD_INVOKES
        _seams.check_backend.call(self)
        object.__setattr__(self, "_derived", True)

    def __getstate__(self) -> dict[str, Any]:
        # For a process backend's workers: a compiled schema validator does not
        # pickle, and the backend object stays where it serves.
        state = self.__dict__.copy()
        state.pop("_schema_validator", None)
        state.pop("backend", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._schema_validator = None
        if self.type == "function" and self.Params is None and self.parameters is not None:
            full = self.parameters
            self._schema_validator = jsonschema.validators.validator_for(full)(full)

    def _injected_names(self, schema: dict[str, Any]) -> tuple[str, ...]:
        """The parameters marked `Injected` (in `Params`) or named in `injected`;
        each must be a property of `schema` (the tool's full parameters schema)."""
        names = dict.fromkeys(
            (self.injected,) if isinstance(self.injected, str) else tuple(self.injected)
        )
        if self.Params is not None:
            names.update(dict.fromkeys(injected_fields(self.Params)))
        if not names:
            return ()
        if self.type != "function":
            raise TypeError(f"tool {self.name!r}: a custom (free-text) tool cannot inject")
        properties = schema.get("properties")
        known = properties if isinstance(properties, dict) else {}
        for name in names:
            if not isinstance(name, str) or name not in known:
                raise ValueError(
                    f"tool {self.name!r}: injected parameter {name!r} is not one of its parameters"
                )
        return tuple(names)

    def _injected_argument_names(self) -> tuple[str, ...]:
        """Every argument name that reaches an injected parameter: its name, and
        for a `Params` field its aliases and Python name. The model may send
        none of them."""
        names = dict.fromkeys(self.injected)
        if self.Params is not None:
            names.update(dict.fromkeys(injected_argument_names(self.Params)))
        return tuple(names)

    def _check_options(self) -> None:
        owner = f"tool {check_tool_name(self.name)!r}"
        # Normalised onto the instance, so a class attribute is checked too and
        # the executor and supervisor only ever see a number or None.
        self.timeout = timeout_seconds(self.timeout, "timeout", owner, "the executor's timeout")
        self.call_timeout = timeout_seconds(
            self.call_timeout,
            "call_timeout",
            owner,
            hint=own_bound("the executor's call_timeout still applies"),
        )
        if self.max_concurrency is not None:
            self.max_concurrency = positive_int(self.max_concurrency, "max_concurrency", owner)
        groups = (self.groups,) if isinstance(self.groups, str) else self.groups
        try:
            groups = tuple(groups)
        except TypeError:
            raise TypeError(f"{owner}: groups must be a list of names") from None
        if not all(isinstance(g, str) and g for g in groups):
            raise TypeError(f"{owner}: groups must be non-empty strings, got {groups!r}")
        limits = self.group_limits
        if not isinstance(limits, Mapping):
            raise TypeError(f"{owner}: group_limits must map group names to limits")
        checked: dict[str, int] = {}
        for group, limit in limits.items():
            if not isinstance(group, str) or not group:
                raise TypeError(f"{owner}: group_limits names must be non-empty strings")
            checked[group] = positive_int(limit, f"group_limits[{group!r}]", owner)
        self.group_limits = checked
        self.groups = groups + tuple(g for g in checked if g not in groups)
        self.scopes = check_scopes(self.scopes, owner)
        self.is_enabled = check_enabled(self.is_enabled, owner)
        self.memory_limit_mb = check_memory_limit(self.memory_limit_mb, owner)
        self.cpu_limit_s = check_cpu_limit(self.cpu_limit_s, owner)
        if self.task_support not in ("forbidden", "optional", "required"):
            raise ValueError(
                f"{owner}: task_support must be 'forbidden', 'optional' or 'required', "
                f"got {self.task_support!r}"
            )
        for flag in ("read_only", "idempotent", "open_world", "external"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(
                    f"{owner}: {flag} must be True or False, got {getattr(self, flag)!r}"
                )
        if self.destructive is not None and not isinstance(self.destructive, bool):
            raise TypeError(
                f"{owner}: destructive must be True, False or None, got {self.destructive!r}"
            )
        if self.destructive and self.read_only:
            raise ValueError(f"{owner}: a read-only tool cannot be destructive")
        self._check_output_schema(owner)
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise TypeError(
                f"{owner}: retry must be a RetryPolicy, got {type(self.retry).__name__}"
            )
        self.policies = check_policies(self.policies, owner)
        for policy in self.policies:
            check = getattr(policy, "check", None)
            if check is not None:
                check(self)

    def _check_output_schema(self, owner: str) -> None:
        check_output_schema(self.output_schema, owner)

    def __setattr__(self, name: str, value: Any) -> None:
        # An output schema replaced after `__init__` (a served tool's is read
        # on every tools/list) is checked as one given at first: a bad one
        # would otherwise break the listing of every tool, not just this one.
        # (A class with its own property for it, FunctionTool's, checks there.)
        if name == "output_schema" and not isinstance(getattr(type(self), name, None), property):
            check_output_schema(value, f"tool '{getattr(self, 'name', type(self).__name__)}'")
        elif name == "name" and self._derived:  # a copy renamed (`merge(prefix=)`), say
            check_tool_name(value)
        if name in _SCHEMA_FIELDS and self._derived:
            # What a call is validated and masked by (the validator, the secret
            # paths, the injected names) is derived from these once: changed
            # under calls in flight, some would be validated by one schema and
            # masked by another, or not validated at all.
            raise AttributeError(
                f"tool {getattr(self, 'name', '?')!r}: {name} is fixed once the tool is "
                "made; make a new tool with the new schema and put it in its place "
                "(ToolRegistry.replace(old, new))"
            )
        object.__setattr__(self, name, value)
        if name == "parse":  # a parse of its own, set on the instance: always asked
            object.__setattr__(self, "validates_dicts", False)
        # Any change makes the plans executors keep for this tool stale.
        object.__setattr__(self, "_version", self._version + 1)

    def _target(self) -> Callable[..., Any]:
        return self.run

    def _target_wants_context(self) -> bool:
        params = [
            p
            for p in inspect.signature(self.run).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        return len(params) >= 2

    # -- description -----------------------------------------------------------

    @property
    def schema(self) -> dict[str, Any]:
        """JSON schema of the parameters the model sets (empty for custom tools):
        injected parameters are left out."""
        return self._schema

    def described(self, description: str) -> Tool:
        """A copy of this tool that says `description` (an executor's `prepare`
        changing what a tool says at one step); this tool is untouched."""
        if not isinstance(description, str):
            raise TypeError(f"tool {self.name!r}: a description must be a string")
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.description = description
        # What `Executor(prepare=)` checks: a copy of the tool it was offered.
        clone._described_from = getattr(self, "_described_from", None) or self
        return clone

    def to_openai(self) -> dict[str, Any]:
        """This tool in OpenAI's Chat Completions format; ValueError for a name OpenAI refuses."""
        check_provider_name(self.name, "OpenAI")
        if self.type == "custom":
            return {
                "type": "custom",
                "custom": {"name": self.name, "description": self.description},
            }
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self._schema,
            },
        }

    # -- the per-call steps ----------------------------------------------------

    def parse(self, arguments: dict[str, Any] | str) -> Any:
        """Validate `arguments` into what `run` receives; raise `ArgumentError`."""
        if self.type == "custom":
            if not isinstance(arguments, str):
                arguments = free_text_input(self.name, arguments)
            if not arguments.isascii():
                _check_utf8(arguments)
            return arguments
        if isinstance(arguments, str):
            arguments = parse_json_arguments(arguments)
        return self.validate(arguments)

    def validate(self, arguments: dict[str, Any]) -> Any:
        if (params := self.Params) is not None:
            try:  # the validator itself unless the model has its own: a frame less per call
                if getattr(params.model_validate, "__func__", None) is _MODEL_VALIDATE:
                    return params.__pydantic_validator__.validate_python(arguments)
                return params.model_validate(arguments)
            except ValidationError as e:
                raise ArgumentError(format_validation_error(self.name, e)) from None
        if (validator := self._schema_validator) is not None:
            problem = arguments_problem(validator, arguments, self._nesting)
            if problem is not None:
                raise ArgumentError(f"Invalid arguments for '{self.name}': {problem}")
        return arguments

    def invoke(self, params: Any, ctx: ToolContext) -> Any:
        """Call `run`; for async tools this returns the coroutine, not its result."""
        run: Callable[..., Any] = self.run
        if self._wants_context:
            return run(params, ctx)
        return run(params)

    if TYPE_CHECKING:
        # `run(self, params)` or `run(self, params, ctx)`, sync or async, typed
        # loosely: every documented form type-checks as an override.
        run: Callable[..., Any]
    else:

        def run(self, params: Any) -> Any:
            """Do the work. Override; may be `async def`; may take a second `ctx`."""
            raise NotImplementedError

    def knows_remote_task(self, handle: str) -> bool | Awaitable[bool]:
        """Whether work a crashed process left under `handle` is still there."""
        return False

    # -- the template method, for use without an executor ------------------------

    def execute(self, arguments: dict[str, Any] | str, *, call_id: str = "direct") -> ToolResult:
        """Validate, run and contain: every outcome comes back as a `ToolResult`.

        Whatever the tool raises, `SystemExit` included, becomes an `error`
        result; only `KeyboardInterrupt`, the caller's own interrupt, passes
        through.
        """
        start = time.monotonic()
        ctx = ToolContext(call_id=call_id, tool=self.name)
        rejected = self._parse_or_reject(arguments, call_id, start)
        if isinstance(rejected, ToolResult):
            return rejected
        try:
            value = self.invoke(rejected[0], ctx)
            if inspect.isawaitable(value):
                value = run_to_completion(value, self.name)
            return self._succeeded(call_id, start, value)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # a tool's SystemExit must not end the caller
            return self._failed(call_id, start, e, ErrorCode.TOOL_ERROR, "error", 1)

    async def aexecute(
        self, arguments: dict[str, Any] | str, *, call_id: str = "direct"
    ) -> ToolResult:
        """Async twin of `execute` (sync tools run in a thread).

        Cancelling the awaiting task cancels the tool and propagates
        `CancelledError`, as cancellation must; like `KeyboardInterrupt`, it is
        not turned into a result. Anything else the tool raises is.
        """
        start = time.monotonic()
        ctx = ToolContext(call_id=call_id, tool=self.name)
        rejected = self._parse_or_reject(arguments, call_id, start)
        if isinstance(rejected, ToolResult):
            return rejected
        try:
            if self.is_async:
                value = await self.invoke(rejected[0], ctx)
            else:
                value = await asyncio.to_thread(self.invoke, rejected[0], ctx)
            return self._succeeded(call_id, start, value)
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as e:  # a tool's SystemExit must not end the caller
            return self._failed(call_id, start, e, ErrorCode.TOOL_ERROR, "error", 1)

    def _parse_or_reject(
        self, arguments: dict[str, Any] | str, call_id: str, start: float
    ) -> tuple[Any] | ToolResult:
        try:  # (the parsed arguments, alone in a tuple)
            if isinstance(arguments, dict):
                check_nesting(arguments)  # as an executor refuses them (and text, parsed)
            return (self.parse(arguments),)
        except ArgumentError as e:
            return self._failed(call_id, start, e, ErrorCode.INVALID_ARGUMENTS, "rejected", 0)
        except Exception as e:  # a subclass's own parse or validate
            error = ArgumentError(f"Invalid arguments for '{self.name}': {error_text(e)}")
            return self._failed(call_id, start, error, ErrorCode.INVALID_ARGUMENTS, "rejected", 0)

    def _succeeded(self, call_id: str, start: float, value: Any) -> ToolResult:
        output, attachments, metadata = normalize_output(value)
        return ToolResult(
            call_id=call_id,
            name=self.name,
            status="ok",
            output=output,
            attachments=attachments,
            metadata=metadata,
            attempts=1,
            duration=time.monotonic() - start,
        )

    def _failed(
        self,
        call_id: str,
        start: float,
        error: BaseException,
        code: ErrorCode,
        status: Literal["error", "rejected"],
        attempts: int,
    ) -> ToolResult:
        metadata: dict[str, Any] = {}
        if isinstance(error, ToolFailure):  # the code and metadata the tool chose
            code, metadata = error.code, error.metadata
        return ToolResult(
            call_id=call_id,
            name=self.name,
            status=status,
            error=error_text(error),
            error_code=code,
            attempts=attempts,
            duration=time.monotonic() - start,
            metadata=metadata,
        )

    def __repr__(self) -> str:
        kind = "read-only" if self.read_only else "mutating"
        return f"<{type(self).__name__} {self.name!r} {self.type} {kind}>"


# `invoke` methods that pass the context only when `_wants_context` says so.
STANDARD_INVOKES: set[Callable[..., Any]] = {Tool.invoke}
