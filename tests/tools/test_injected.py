"""Injected parameters (`Annotated[str, Injected]`): the model never sets them.

They are left out of every exported schema (OpenAI Chat and Responses,
Anthropic, MCP), a model-supplied value is refused on the raw arguments before
any hook runs, their values come from `Executor(inject=...)` (sync or async,
with the caller's contextvars) or a pre-call hook, they are masked whatever
their names, and they never change a call's idempotency key.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import sqlite3
import threading
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import pytest
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr

from tests.conftest import MakeExecutor
from toolbus import (
    ErrorCode,
    Executor,
    Injected,
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    bus,
    tool,
)
from toolbus.mcp import mcp_tool
from toolbus.providers import anthropic, openai

SECRET = "sk-live-7f3a9c2e5b1d"
USER = "person-4711"

current_user: contextvars.ContextVar[str] = contextvars.ContextVar("current_user", default="")


class Account(BaseModel):
    owner: str
    pin: str


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def search(query: str, api_key: Annotated[str, Injected], limit: int = 3) -> dict[str, Any]:
        """Search the web."""
        return {"query": query, "limit": limit, "key_seen": api_key == SECRET}

    @registry.tool
    def pay(amount: int, account: Annotated[Account, Injected]) -> str:
        """Pay from the signed-in person's account."""
        return f"paid {amount} from {account.owner}"

    @registry.tool(read_only=True)
    def whoami(user_ref: Annotated[str, Injected]) -> str:
        """Who is signed in (the value comes back in the output)."""
        return f"you are {user_ref}"

    @registry.tool(read_only=True)
    async def asearch(query: str, api_key: Annotated[str, Injected]) -> str:
        """Search, async."""
        await asyncio.sleep(0)
        return f"{query}: {api_key == SECRET}"

    @registry.tool(read_only=True)
    def optional(query: str, region: Annotated[str, Injected] = "eu") -> str:
        """An injected parameter with a default."""
        return f"{query}@{region}"

    return registry


def properties(schema: dict[str, Any]) -> set[str]:
    return set(schema.get("properties", {}))


# -- exported schemas ---------------------------------------------------------------


def test_an_injected_parameter_is_absent_from_all_exported_schemas() -> None:
    registry = make_registry()
    chat = {d["function"]["name"]: d["function"] for d in openai.chat_tool_definitions(registry)}
    strict = {
        d["function"]["name"]: d["function"]
        for d in openai.chat_tool_definitions(registry, strict=True)
    }
    responses = {d["name"]: d for d in openai.responses_tool_definitions(registry)}
    claude = {d["name"]: d for d in anthropic.tool_definitions(registry)}
    mcp = {t.name: t for t in (mcp_tool(t) for t in registry.list())}

    for exported in (
        properties(chat["search"]["parameters"]),
        properties(strict["search"]["parameters"]),
        properties(responses["search"]["parameters"]),
        properties(claude["search"]["input_schema"]),
        properties(mcp["search"].input_schema),
        properties(registry.get("search").to_openai()["function"]["parameters"]),
    ):
        assert exported == {"query", "limit"}
    for schema in (
        chat["pay"]["parameters"],
        strict["pay"]["parameters"],
        claude["pay"]["input_schema"],
        mcp["pay"].input_schema,
    ):
        assert properties(schema) == {"amount"}
        assert "account" not in schema.get("required", [])
        # The injected model's definition does not describe it to the model either.
        assert "Account" not in str(schema)
    assert "required" not in chat["whoami"]["parameters"]
    assert properties(chat["whoami"]["parameters"]) == set()
    assert chat["search"]["parameters"]["required"] == ["query"]


def test_the_tool_knows_its_injected_parameters() -> None:
    registry = make_registry()
    search = registry.get("search")
    assert search.injected == ("api_key",)
    assert search.injected_required == frozenset({"api_key"})
    assert ("api_key",) in search.secret_paths
    optional = registry.get("optional")
    assert optional.injected == ("region",)
    assert optional.injected_required == frozenset()


def test_a_tool_subclass_and_a_json_schema_tool_can_inject() -> None:
    class WeatherParams(BaseModel):
        city: str
        token: Annotated[str, Injected]

    class Weather(Tool):
        name = "weather"
        Params: ClassVar[type[BaseModel]] = WeatherParams

        def run(self, params: WeatherParams) -> str:
            return f"{params.city}:{params.token == SECRET}"

    class Lookup(Tool):
        name = "lookup"
        parameters: ClassVar[dict[str, Any]] = {
            "type": "object",
            "properties": {"id": {"type": "string"}, "tenant": {"type": "string"}},
            "required": ["id", "tenant"],
        }
        injected = ("tenant",)

        def run(self, params: dict[str, Any]) -> str:
            return f"{params['id']}@{params['tenant']}"

    registry = ToolRegistry([Weather(), Lookup()])
    assert properties(registry.get("weather").schema) == {"city"}
    assert registry.get("lookup").schema == {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "required": ["id"],
    }
    with Executor(registry, inject={"token": lambda c: SECRET, "tenant": lambda c: "acme"}) as ex:
        assert ex.execute(ToolCall(name="weather", arguments={"city": "Oslo"})).output == (
            "Oslo:True"
        )
        # The tenant is an injected value: masked in the output too.
        assert ex.execute(ToolCall(name="lookup", arguments={"id": "7"})).output == "7@***"


def test_mistakes_in_declaring_injected_parameters_are_errors() -> None:
    with pytest.raises(TypeError, match="marker"):
        Injected()

    class Wrong(Tool):
        name = "wrong"
        parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"a": {}}}
        injected = ("b",)

        def run(self, params: Any) -> None:
            return None

    with pytest.raises(ValueError, match="'b' is not one of its parameters"):
        Wrong()

    def free_text(text: Annotated[str, Injected]) -> str:
        return text

    with pytest.raises(TypeError, match="cannot be Injected"):
        tool(type="custom")(free_text)


# -- values -----------------------------------------------------------------------------


def test_values_come_from_inject_by_name_and_the_tools_own_key_wins(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(
        make_registry(),
        inject={
            "api_key": lambda call: SECRET,
            "whoami.user_ref": lambda call: USER,
            "user_ref": lambda call: "not this one",
            "account": lambda call: Account(owner="ann", pin="9876"),
        },
    )
    batch = ex.execute_batch(
        [
            ToolCall(id="s", name="search", arguments='{"query": "toolbus"}'),
            ToolCall(id="w", name="whoami", arguments={}),
            ToolCall(id="p", name="pay", arguments={"amount": 5}),
        ]
    )
    assert [r.status for r in batch] == ["ok", "ok", "ok"]
    assert batch[0].output == {"query": "toolbus", "limit": 3, "key_seen": True}
    assert batch[2].output == "paid 5 from ann"
    # Injected values are masked whatever their names: the output shows none.
    assert batch[1].output == "you are ***"


def test_providers_may_be_async_and_run_with_the_callers_contextvars(
    make_executor: MakeExecutor,
) -> None:
    async def key_for(call: ToolCall) -> str:
        await asyncio.sleep(0)
        return SECRET if current_user.get() == USER else "nobody"

    seen: list[str] = []

    def user(call: ToolCall) -> str:
        seen.append(current_user.get())
        return current_user.get()

    ex = make_executor(make_registry(), inject={"api_key": key_for, "user_ref": user})
    current_user.set(USER)
    results = ex.execute_batch(
        [
            ToolCall(name="search", arguments={"query": "q"}),
            ToolCall(name="asearch", arguments={"query": "q"}),
            ToolCall(name="whoami", arguments={}),
        ]
    )
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert results[0].output["key_seen"] is True
    assert results[1].output == "q: True"
    assert seen == [USER]


async def test_async_callers_get_injected_values_too(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry(), inject={"api_key": lambda call: SECRET})
    result = await ex.aexecute(ToolCall(name="asearch", arguments={"query": "q"}))
    assert result.output == "q: True"


def test_a_pre_call_hook_may_supply_the_value(make_executor: MakeExecutor) -> None:
    def add_key(call: ToolCall) -> ToolCall:
        assert isinstance(call.arguments, dict)
        if call.name == "search":
            return call.with_arguments({**call.arguments, "api_key": SECRET})
        return call

    ex = make_executor(make_registry(), pre_call=[add_key])
    result = ex.execute(ToolCall(name="search", arguments={"query": "q"}))
    assert result.status == "ok"
    assert result.output["key_seen"] is True


def test_a_default_applies_when_nothing_supplies_the_value(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry())
    assert ex.execute(ToolCall(name="optional", arguments={"query": "q"})).output == "q@eu"


def test_a_required_value_nobody_supplies_makes_the_tool_unavailable(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(make_registry())
    result = ex.execute(ToolCall(name="search", arguments={"query": "q"}))
    assert result.status == "rejected"
    assert result.error_code == ErrorCode.TOOL_UNAVAILABLE
    assert "'api_key'" in (result.error or "")


# -- a model-supplied value ---------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments", [{"query": "q", "api_key": SECRET}, f'{{"query": "q", "api_key": "{SECRET}"}}']
)
def test_a_model_supplied_value_is_rejected_before_any_hook(
    make_executor: MakeExecutor, arguments: dict[str, Any] | str
) -> None:
    hooked: list[str] = []
    provided: list[str] = []

    def hook(call: ToolCall) -> ToolCall:
        hooked.append(call.name)
        return call

    def provider(call: ToolCall) -> str:
        provided.append(call.name)
        return "from the application"

    ex = make_executor(make_registry(), pre_call=[hook], inject={"api_key": provider})
    with bus.Recorder(sender=ex) as rec:
        result = ex.execute(ToolCall(name="search", arguments=arguments))
        ex.drain_events()
    assert result.status == "rejected"
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert "'api_key' cannot be set by the model" in (result.error or "")
    assert SECRET not in (result.error or "")
    assert hooked == [] and provided == []
    assert result.attempts == 0
    assert SECRET not in repr([e for name in rec.names() for e in rec.of(name)])


def test_a_model_supplied_value_is_rejected_even_when_null(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry(), inject={"region": lambda c: "us"})
    result = ex.execute(ToolCall(name="optional", arguments={"query": "q", "region": None}))
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS


class _AliasedParams(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    q: str
    tenant: Annotated[str, Injected] = Field("default-tenant", alias="tenantId")
    region: Annotated[str, Injected] = Field(
        "eu", validation_alias=AliasChoices("regionCode", "zone")
    )


class _Aliased(Tool):
    name = "aliased"
    description = "Injected fields read under other names."
    read_only = True
    Params = _AliasedParams

    def run(self, params: _AliasedParams) -> str:
        return f"tenant={params.tenant} region={params.region}"


@pytest.mark.parametrize("name", ["tenantId", "tenant", "regionCode", "zone", "region"])
def test_an_injected_field_is_refused_under_every_name_it_is_read_from(
    name: str, make_executor: MakeExecutor
) -> None:
    registry = ToolRegistry()
    aliased = registry.register(_Aliased())
    assert aliased.injected == ("tenantId", "regionCode")
    assert set(aliased.schema["properties"]) == {"q"}
    for ex in (
        make_executor(registry),
        make_executor(registry, inject={"tenantId": lambda c: "app", "regionCode": lambda c: "no"}),
    ):
        result = ex.execute(ToolCall(name="aliased", arguments={"q": "x", name: "EVIL"}))
        assert result.status == "rejected"
        assert result.error_code == ErrorCode.INVALID_ARGUMENTS
        assert f"'{name}' cannot be set by the model" in (result.error or "")
    supplied = ex.execute(ToolCall(name="aliased", arguments={"q": "x"}))
    assert supplied.output == "tenant=app region=no"


def test_an_injected_value_a_hook_sets_by_its_python_name_is_masked(
    make_executor: MakeExecutor,
) -> None:
    registry = ToolRegistry()
    registry.register(_Aliased())

    def supply(call: ToolCall) -> ToolCall:
        return call.with_arguments({**call.arguments, "tenant": USER})

    ex = make_executor(registry, pre_call=[supply], masker=lambda call: call.arguments)
    with bus.Recorder("tool:executing", sender=ex) as rec:
        result = ex.execute(ToolCall(name="aliased", arguments={"q": "x"}))
        (event,) = rec.wait_for("tool:executing", 1)
    assert result.output == "tenant=*** region=eu"
    assert event.arguments == {"q": "x", "tenant": "***"}


# -- masking ------------------------------------------------------------------------------


def test_injected_values_are_masked_whatever_their_names(make_executor: MakeExecutor) -> None:
    registry = make_registry()

    @registry.tool(read_only=True)
    def explode(city: str, user_ref: Annotated[str, Injected]) -> str:
        raise RuntimeError(f"backend refused {user_ref} for {city}")

    ex = make_executor(
        registry,
        inject={
            "user_ref": lambda call: USER,
            "account": lambda c: Account(owner=USER, pin="pin-9876"),
        },
    )
    with bus.Recorder(sender=ex) as rec:
        batch = ex.execute_batch(
            [
                ToolCall(name="whoami", arguments={}),
                ToolCall(name="explode", arguments={"city": "Oslo"}),
                ToolCall(name="pay", arguments={"amount": 3}),
            ]
        )
        ex.drain_events()
    assert batch[0].output == "you are ***"
    assert batch[1].error == "RuntimeError: backend refused *** for Oslo"
    assert batch[2].output == "paid 3 from ***"
    executing = {e.tool: e.arguments for e in rec.of("tool:executing")}
    assert executing["whoami"] == {"user_ref": "***"}
    assert executing["explode"] == {"city": "Oslo", "user_ref": "***"}
    assert executing["pay"] == {"amount": 3, "account": "***"}
    everything = repr([e for name in rec.names() for e in rec.of(name)])
    assert (
        USER not in everything and "pin-9876" not in everything
    )  # not bare digits: a timestamp may hold them


class _Client:
    """A plain client object: its credentials in attributes, a lock beside them."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.lock = threading.Lock()


class _SlotClient:
    __slots__ = ("secret",)

    def __init__(self, secret: str) -> None:
        self.secret = secret


@pytest.mark.parametrize("make", [_Client, _SlotClient])
def test_a_plain_objects_attributes_are_scrubbed(
    make_executor: MakeExecutor, make: Callable[[str], Any]
) -> None:
    """Only a dataclass's or a pydantic model's fields were: a plain client's
    token in an error text reached the result and events (hunt 6)."""
    registry = ToolRegistry()

    @registry.tool
    def fetch(q: str, client: Annotated[Any, Injected]) -> str:
        raise ValueError(f"{q} failed with {getattr(client, 'token', None) or client.secret}")

    ex = make_executor(registry, inject={"client": lambda c: make(SECRET)})
    with bus.Recorder(sender=ex) as rec:
        r = ex.execute(ToolCall(name="fetch", arguments={"q": "hi"}))
        ex.drain_events()
    assert r.error == "ValueError: hi failed with ***"
    assert SECRET not in repr([e for name in rec.names() for e in rec.of(name)])


def test_a_custom_masker_cannot_show_them(make_executor: MakeExecutor) -> None:
    ex = make_executor(
        make_registry(), masker=lambda call: call.arguments, inject={"user_ref": lambda c: USER}
    )
    with bus.Recorder("tool:executing", sender=ex) as rec:
        ex.execute(ToolCall(name="whoami", arguments={}))
        (event,) = rec.wait_for("tool:executing", 1)
    assert event.arguments == {"user_ref": "***"}


class _Shown:
    """A masker's result that is neither JSON nor a model: an object whose text
    shows the arguments."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    def __repr__(self) -> str:
        return f"Shown({self.arguments})"


class _ShownModel(BaseModel):
    text: str


# A custom masker may return any shape; none may publish an injected or
# secret-typed value (nor one escaped as JSON or a repr writes it).
MASKER_SHAPES: dict[str, Callable[[ToolCall], Any]] = {
    "repr text": lambda call: str(call.arguments),
    "key=value text": lambda call: ", ".join(f"{k}={v}" for k, v in call.arguments.items()),
    "JSON text": lambda call: json.dumps(call.arguments),
    "JSON text of a list": lambda call: json.dumps(list(call.arguments.items())),
    "bytes": lambda call: str(call.arguments).encode(),
    "list of pairs": lambda call: list(call.arguments.items()),
    "tuple": lambda call: tuple(call.arguments.values()),
    "nested in a dict": lambda call: {"all": str(call.arguments), "n": len(call.arguments)},
    "None": lambda call: None,
    "object": lambda call: _Shown(call.arguments),
    "pydantic model": lambda call: _ShownModel(text=repr(call.arguments)),
    "number": lambda call: 7,
}


@pytest.mark.parametrize("shape", list(MASKER_SHAPES))
def test_no_masker_shape_publishes_an_injected_or_typed_secret(
    shape: str, make_executor: MakeExecutor, tmp_path: Any
) -> None:
    odd = 'sk-"quoted"\\back\nline'  # escaped differently by JSON and by repr
    registry = ToolRegistry()

    @registry.tool
    def charge(amount: int, api_key: Annotated[str, Injected]) -> str:
        """Mutating, so the journal records its masked arguments."""
        return f"charged {amount}"

    @registry.tool(read_only=True)
    def unlock(vault: str, blob: SecretStr) -> str:
        """A secret-typed parameter."""
        return f"opened {vault}"

    @registry.tool(read_only=True)
    def tricky(note: str, api_key: Annotated[str, Injected]) -> str:
        """An injected value that JSON and repr escape."""
        return "ok"

    journal = tmp_path / "journal.db"
    ex = make_executor(
        registry,
        masker=MASKER_SHAPES[shape],
        inject={"charge.api_key": lambda c: SECRET, "tricky.api_key": lambda c: odd},
        journal=str(journal),
    )
    with bus.Recorder(sender=ex) as rec:
        results = [
            ex.execute(ToolCall(name="charge", arguments={"amount": 5})),
            ex.execute(ToolCall(name="unlock", arguments={"vault": "home", "blob": SECRET})),
            ex.execute(ToolCall(name="tricky", arguments={"note": "plain"})),
        ]
        ex.drain_events()
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    executing = rec.of("tool:executing")
    assert len(executing) == 3
    published = repr([e for name in rec.names() for e in rec.of(name)])
    for leak in (SECRET, odd, json.dumps(odd)[1:-1], repr(odd)[1:-1]):
        assert leak not in published
    ex.close()
    rows = sqlite3.connect(journal).execute("select arguments from calls").fetchall()
    assert rows and not any(SECRET in r[0] for r in rows)


def test_a_masker_text_keeps_what_it_shows(make_executor: MakeExecutor) -> None:
    ex = make_executor(
        make_registry(),
        masker=lambda call: ", ".join(f"{k}={v}" for k, v in call.arguments.items()),
        inject={"api_key": lambda c: SECRET},
    )
    with bus.Recorder("tool:executing", sender=ex) as rec:
        result = ex.execute(ToolCall(name="search", arguments={"query": "weather oslo"}))
        (event,) = rec.wait_for("tool:executing", 1)
    # The text is published with the secret scrubbed; what it shows stays
    # readable, in it and in the output (the masker did not hide it).
    assert event.arguments == "query=weather oslo, api_key=***"
    assert result.output == {"query": "weather oslo", "limit": 3, "key_seen": True}


def test_a_masker_text_with_a_secret_too_short_to_scrub_publishes_nothing(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(
        make_registry(),
        masker=lambda call: str(call.arguments),
        inject={"user_ref": lambda c: "u7"},
    )
    with bus.Recorder("tool:executing", sender=ex) as rec:
        ex.execute(ToolCall(name="whoami", arguments={}))
        (event,) = rec.wait_for("tool:executing", 1)
    assert event.arguments is None


def test_a_failing_provider_rejects_the_call_without_leaking(make_executor: MakeExecutor) -> None:
    def broken(call: ToolCall) -> str:
        raise PermissionError("no signed-in session")

    ex = make_executor(make_registry(), inject={"api_key": broken})
    result = ex.execute(ToolCall(name="search", arguments={"query": "q"}))
    assert result.status == "rejected"
    assert result.error_code == ErrorCode.TOOL_NOT_ALLOWED
    assert result.error == "Could not supply 'api_key': PermissionError: no signed-in session"


# -- idempotency keys -----------------------------------------------------------------------


def test_injected_values_do_not_change_the_idempotency_key(make_executor: MakeExecutor) -> None:
    registry = ToolRegistry()
    keys: list[str] = []

    @registry.tool
    def charge(amount: int, api_key: Annotated[str, Injected], ctx: ToolContext) -> str:
        keys.append(ctx.idempotency_key)
        return "charged"

    n = itertools.count()
    ex = make_executor(registry, inject={"api_key": lambda call: f"key-{next(n)}-secret"})
    first = ex.execute(ToolCall(id="call_1", name="charge", arguments={"amount": 5}))
    second = ex.execute(ToolCall(id="call_1", name="charge", arguments={"amount": 5}))
    assert first.ok and second.ok
    assert len(keys) == 2 and keys[0] == keys[1]
    third = ex.execute(ToolCall(id="call_1", name="charge", arguments={"amount": 6}))
    assert third.ok and keys[2] != keys[0]  # the arguments the model sent do count


# -- options -----------------------------------------------------------------------------------


def test_inject_option_is_checked() -> None:
    registry = make_registry()
    with pytest.raises(TypeError, match="must be callable"):
        Executor(registry, inject={"api_key": "sk-123"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"'param' or 'tool\.param'"):
        Executor(registry, inject={"": lambda c: 1})
    with pytest.raises(ValueError, match="tool 'search' has no injected parameter 'query'"):
        Executor(registry, inject={"search.query": lambda c: 1})
    with pytest.raises(TypeError, match="must map"):
        Executor(registry, inject=[("api_key", lambda c: 1)])  # type: ignore[arg-type]
    # A tool registered later, or a name no tool has yet, is fine.
    Executor(registry, inject={"later.param": lambda c: 1, "anything": lambda c: 1}).close()
