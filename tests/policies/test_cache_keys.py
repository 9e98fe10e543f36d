"""`cache` keys: only data, ALL of it, each value with its type.

A pydantic model or dataclass is data only when everything it holds is (its
excluded fields, private attributes and extra attributes too): a SecretStr
makes it not data (not cached), never a key that masks it. Values of
different types (Enums of different classes, a str subclass and a str, a
tuple and a list, two dataclasses with the same fields) never share a key.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import decimal
import enum
import os
import subprocess
import sys
import types
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, PrivateAttr, SecretBytes, SecretStr

from tests.conftest import MakeExecutor
from toolbus import Injected, ToolCall, ToolRegistry, ToolResult, tool
from toolbus.policies import Admit, Delay, Respond, cache
from toolbus.policies._cache_key import cache_key

user: contextvars.ContextVar[str] = contextvars.ContextVar("user", default="ann")


class Cred(BaseModel):
    api_key: SecretStr


class BytesCred(BaseModel):
    token: SecretBytes


class Excluded(BaseModel):
    a: int
    who: str = Field(exclude=True)


class Private(BaseModel):
    a: int
    _who: str = PrivateAttr(default="")


class Extra(BaseModel, extra="allow"):
    a: int


class Obj:
    pass


class Held(BaseModel):
    model_config = {"arbitrary_types_allowed": True}
    o: Obj


@dataclasses.dataclass
class Hidden:
    id: int
    token: str = dataclasses.field(default="", repr=False, compare=False)


@dataclasses.dataclass
class Later:
    id: int

    def __post_init__(self) -> None:
        self.who = ""


@dataclasses.dataclass(slots=True)
class Slotted:
    id: int


@dataclasses.dataclass
class A:
    id: int


@dataclasses.dataclass
class B:
    id: int


class MA(BaseModel):
    id: int


class MB(BaseModel):
    id: int


class E1(enum.Enum):
    X = 1


class E2(enum.Enum):
    Y = 1


class IE(enum.IntEnum):
    X = 1


class EObj(enum.Enum):
    X = Obj()


class S(str):
    pass


class I(int):  # noqa: E742
    pass


class F(float):
    pass


@tool(read_only=True, name="lookup")
def _lookup(q: Any) -> str:
    return str(q)


def _key(value: Any) -> bytes | None:
    return cache_key("t", value)


def _private(who: str) -> Private:
    p = Private(a=1)
    p._who = who
    return p


def _later(who: str) -> Later:
    d = Later(1)
    d.who = who
    return d


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Excluded(a=1, who="ann"), Excluded(a=1, who="bob")),
        (_private("ann"), _private("bob")),
        (Extra(a=1, who="ann"), Extra(a=1, who="bob")),  # type: ignore[call-arg]
        (Hidden(1, "ann"), Hidden(1, "bob")),
        (_later("ann"), _later("bob")),
        (Slotted(1), Slotted(2)),
    ],
    ids=["excluded", "private", "extra", "repr-false", "non-field", "slots"],
)
def test_everything_a_model_or_dataclass_holds_is_keyed(a: Any, b: Any) -> None:
    assert _key(a) is not None and _key(b) is not None
    assert _key(a) != _key(b)


@pytest.mark.parametrize(
    "value",
    [
        Cred(api_key=SecretStr("sk-ann")),
        BytesCred(token=SecretBytes(b"sk-ann")),
        {"cred": Cred(api_key=SecretStr("sk-ann"))},
        SecretStr("sk-ann"),
        Held(o=Obj()),
        EObj.X,
        datetime.datetime(2026, 1, 1, tzinfo=type("TZ", (datetime.tzinfo,), {})()),
        b"bytes",
    ],
    ids=["secretstr", "secretbytes", "nested", "bare", "object", "enum-object", "tz", "bytes"],
)
def test_a_secret_or_an_object_is_not_data(value: Any) -> None:
    assert _key(value) is None


def test_an_object_held_as_a_private_or_extra_attribute_is_not_data() -> None:
    p = Private(a=1)
    p._who = Obj()  # type: ignore[assignment]
    assert _key(p) is None
    d = Later(1)
    d.who = Obj()  # type: ignore[assignment]
    assert _key(d) is None
    assert _key(Extra(a=1, o=Obj())) is None  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (E1.X, E2.Y),
        (E1.X, 1),
        (IE.X, 1),
        (S("a"), "a"),
        (I(1), 1),
        (F(1.5), 1.5),
        (A(1), B(1)),
        (A(1), {"id": 1}),
        (MA(id=1), MB(id=1)),
        (MA(id=1), A(1)),
        ((1, 2), [1, 2]),
        ("1", 1),
        (1, 1.0),
        (1, True),
        ({1: "x"}, {"1": "x"}),
        (decimal.Decimal("1.0"), decimal.Decimal("1.00")),
        (datetime.date(2026, 1, 1), "2026-01-01"),
        (uuid.UUID(int=1), uuid.UUID(int=1).hex),
        ({"a": [1]}, {"a": (1,)}),
    ],
)
def test_values_of_different_types_key_apart(a: Any, b: Any) -> None:
    assert _key(a) is not None and _key(b) is not None
    assert _key(a) != _key(b)


def test_equal_data_keys_alike() -> None:
    assert _key({"a": 1, "b": [E1.X, A(2)]}) == _key({"b": [E1.X, A(2)], "a": 1})
    assert _key(MA(id=3)) == _key(MA(id=3))
    assert _key(_private("ann")) == _key(_private("ann"))
    assert _key(10**5000) != _key(10**5000 + 1)  # past the 4300 digits of int -> str


def test_a_key_function_returning_1_or_the_text_1_keys_apart() -> None:
    texts = cache(ttl=60, key=lambda call: call.arguments["q"])
    first = ToolCall(id="a", name="lookup", arguments={"q": "1"})
    texts.admit(first, _lookup, 0.0)
    texts.on_result(first, ToolResult(call_id="a", name="lookup", status="ok", output="s"), 0.0)
    other = ToolCall(id="b", name="lookup", arguments={"q": 1})
    assert texts.admit(other, _lookup, 1.0) == Admit()
    again = ToolCall(id="c", name="lookup", arguments={"q": "1"})
    assert isinstance(texts.admit(again, _lookup, 1.0), Respond)


def test_a_secret_never_answers_another_users_call(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    # SecretStr dumps as '**********' for every user: keyed by its dump, bob
    # was answered with ann's result. Not data: not cached at all.
    keys = {"ann": "sk-ANN-1111", "bob": "sk-BOB-2222"}
    c = cache(ttl=60)
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[c])
    def balance(q: str, cred: Annotated[Cred, Injected]) -> str:
        return "balance for " + cred.api_key.get_secret_value()[:6]

    ex = make_executor(reg, inject={"cred": lambda call: Cred(api_key=SecretStr(keys[user.get()]))})
    for who in ("ann", "bob", "ann"):
        user.set(who)
        r = ex.execute(ToolCall(name="balance", arguments={"q": "x"}))
        assert r.ok and r.output == "balance for " + keys[who][:6]
        assert "cache" not in r.metadata
    assert len(c) == 0
    assert caplog.text.count("not cached") == 1
    assert "sk-" not in caplog.text


def test_a_flight_resolves_though_the_key_function_would_fail_when_told() -> None:
    # The key function works when a call is asked, then raises (or, read on
    # another thread, would give another key): the leader's end must still
    # resolve its flight, or its followers wait out the cache's `wait`.
    asked: dict[int, int] = {}

    def key(call: ToolCall) -> Any:
        asked[id(call)] = asked.get(id(call), 0) + 1
        if asked[id(call)] > 1:
            raise RuntimeError("asked again")
        return "k"

    c = cache(ttl=60, wait=600, key=key)
    leader = ToolCall(id="a", name="lookup", arguments={"q": "x"})
    follower = ToolCall(id="b", name="lookup", arguments={"q": "x"})
    assert c.admit(leader, _lookup, 0.0) == Admit()
    waiting = c.admit(follower, _lookup, 0.0)
    assert isinstance(waiting, Delay) and waiting.until is not None and c.waiting == 1
    stored = c.on_result(leader, ToolResult(call_id="a", name="lookup", status="ok"), 1.0)
    assert stored is not None and stored.metadata == {"cache": "miss"}
    assert waiting.until.done() and c.waiting == 0 and len(c) == 1


def test_a_failed_leader_and_a_dropped_follower_are_told_by_the_key_they_were_asked_with() -> None:
    calls = iter(range(100))
    c = cache(ttl=60, wait=600, key=lambda call: "k" if next(calls) < 2 else object())
    leader = ToolCall(id="a", name="lookup", arguments={"q": "x"})
    follower = ToolCall(id="b", name="lookup", arguments={"q": "x"})
    assert c.admit(leader, _lookup, 0.0) == Admit()
    waiting = c.admit(follower, _lookup, 0.0)
    assert isinstance(waiting, Delay) and waiting.until is not None
    c.on_dropped(follower, ToolResult(call_id="b", name="lookup", status="cancelled"), 1.0)
    assert c.waiting == 0
    c.on_result(leader, ToolResult(call_id="a", name="lookup", status="error", error="x"), 1.0)
    assert waiting.until.done()


def _local_classes() -> dict[str, type]:
    """Classes made in a function: every call makes new ones, of the same
    `__module__` and `__qualname__` (`_local_classes.<locals>.Point`...)."""

    @dataclasses.dataclass
    class Point:
        x: int

    class Model(BaseModel):
        x: int

    class Kind(enum.Enum):
        X = 1

    class Text(str):
        pass

    @dataclasses.dataclass(slots=True)
    class Slots:
        x: int

    return {"dataclass": Point, "model": Model, "enum": Kind, "str": Text, "slots": Slots}


def _one_of(kind: type) -> Any:
    if issubclass(kind, enum.Enum):
        return kind(1)
    if issubclass(kind, str):
        return kind("x")
    return kind(x=1)


@pytest.mark.parametrize("which", ["dataclass", "model", "enum", "str", "slots"])
def test_two_local_classes_of_one_qualname_key_apart(which: str) -> None:
    """Two classes made by one function share `__module__` and `__qualname__`:
    they keyed alike, so a call with one's instance was answered with what a
    call with the other's had returned. Distinct classes never share a key."""
    first, second = _local_classes()[which], _local_classes()[which]
    assert first is not second and first.__qualname__ == second.__qualname__
    a, b = _one_of(first), _one_of(second)
    assert _key(a) is not None and _key(b) is not None
    assert _key(a) != _key(b)
    assert _key(a) == _key(_one_of(first))  # the same class keys alike, as ever


def test_a_module_class_shadowed_by_another_of_its_name_keys_apart() -> None:
    """A class redefined under its name (a module reloaded, a name rebound):
    the older one is no longer the class its name reaches, and keys apart
    from then on. (Keys made before the redefinition were made by the name,
    as the new class's are: a cache entry made then is shared, a documented
    limit.)"""
    source = "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\n"
    module = types.ModuleType("cache_key_shadowing")
    sys.modules[module.__name__] = module
    try:
        exec(source, module.__dict__)
        old = module.P(1)
        exec(source, module.__dict__)
        assert type(old) is not module.P
        assert _key(module.P(1)) != _key(old)
    finally:
        del sys.modules[module.__name__]


def test_a_module_level_class_keys_alike_in_every_process() -> None:
    """Keys of module-level classes are made of their names, not of anything
    this process alone has (an address, a counter): another process makes the
    same ones."""
    code = (
        "from tests.policies.test_cache_keys import A, E1, MA, S, Slotted\n"
        "from toolbus.policies._cache_key import cache_key\n"
        "print(cache_key('t', [A(1), E1.X, MA(id=2), S('s'), Slotted(3)]).hex())\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True
    )
    here = _key([A(1), E1.X, MA(id=2), S("s"), Slotted(3)])
    assert here is not None and out.stdout.strip() == here.hex()


def test_classes_a_metaclass_calls_equal_key_apart() -> None:
    """(Numbered by identity: a metaclass may say two classes are equal.)"""

    class AllEqual(type):
        def __eq__(cls, other: object) -> bool:
            return True

        def __hash__(cls) -> int:
            return 0

    def make() -> type:
        @dataclasses.dataclass
        class Same(metaclass=AllEqual):
            x: int

        return Same

    first, second = make(), make()
    assert first == second and first is not second
    assert _key(first(x=1)) != _key(second(x=1))  # type: ignore[call-arg]
