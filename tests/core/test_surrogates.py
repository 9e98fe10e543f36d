"""Lone surrogates (a file name decoded with `surrogateescape`) in values JSON
cannot hold: `_json.reread` keeps them exactly, toolbus's own wire carries
them exactly (`dumps_surrogatepass`/`loads_surrogatepass`), and `encodable`
makes them writable without merging keys."""

from __future__ import annotations

import enum
from typing import Any

import orjson
import pytest

from toolbus import _json
from toolbus._text import encodable, key_of

E9 = b"report-\xe9.txt".decode("utf-8", "surrogateescape")  # "report-\udce9.txt"
E8 = b"report-\xe8.txt".decode("utf-8", "surrogateescape")
# Two lone surrogates side by side that UTF-16 would read as one character.
PAIR = "\ud83d\ude00"


class Color(enum.IntEnum):
    RED = 1


def test_reread_keeps_every_string_exactly_two_surrogates_stay_two() -> None:
    """The JSON text round trip joined the escapes of a high and a low
    surrogate into one character, 😀 (review)."""
    value = {"p": PAIR, "hi": PAIR[0], E9: [E8, {E8: E9}]}
    back = _json.reread(value)
    assert back == value
    assert len(back["p"]) == 2
    assert type(_json.reread([Color.RED, E9])[0]) is int
    assert _json.reread({"n": float("nan"), "big": 2**70, "t": (1, E9)}) == {
        "n": None,
        "big": 2**70,
        "t": [1, E9],
    }


def _nested(levels: int, name: str) -> Any:
    """A long list (two levels deep, its last items strings) inside `levels` lists."""
    value: Any = [[0]] * 2000 + ["x"] * 600 + [name]
    for _ in range(levels):
        value = [value]
    return value


def test_reread_of_a_long_list_agrees_with_the_walk_wherever_the_surrogate_is() -> None:
    """Runs of a long list that orjson writes are read back from its JSON,
    the rest walked: the result is the same either way."""
    for where in (0, 255, 256, 257, 999, 1999):
        rows: list[Any] = [
            {"name": f"f{i}", "size": i, "big": 2**70 if i == 7 else 1} for i in range(2000)
        ]
        rows[where] = {"name": E9, E8: [PAIR]}
        assert _json.reread(rows) == rows
    assert _json.reread(tuple(range(1000))) == list(range(1000))
    # A run read back from orjson's JSON is judged as deep as it lies: what
    # orjson refuses for its depth, reread refuses too.
    for levels in (251, 252, 253):
        try:
            orjson.dumps(_nested(levels, "x"))
        except TypeError:
            with pytest.raises(TypeError, match="Recursion limit"):
                _json.reread(_nested(levels, PAIR))
        else:
            assert _json.reread(_nested(levels, PAIR)) == _nested(levels, PAIR)


def test_the_wire_carries_lone_surrogates_exactly() -> None:
    message = {"kind": "ok", "output": {E9: 1, E8: [PAIR, f"key {E9}"], "n": 2**70}}
    data = _json.dumps_surrogatepass(message)
    back = _json.loads_surrogatepass(data)
    assert back == message
    assert len(back["output"][E8][0]) == 2
    # Anything else: the bytes `dumps` writes, read as `loads` reads them.
    assert _json.dumps_surrogatepass({"a": [1, "é"]}) == _json.dumps({"a": [1, "é"]})
    assert _json.loads_surrogatepass(b'{"a":[1,"\xc3\xa9"]}') == {"a": [1, "é"]}


@pytest.mark.parametrize(
    "data",
    [b"NaN", b'{"a": NaN, "b": "\xed\xb3\xa9"}', b'"\xff"', b'{"a": "\xed\xb3\xa9"', b"[" * 5000],
)
def test_the_wire_reader_refuses_what_is_not_json(data: bytes) -> None:
    with pytest.raises(ValueError):
        _json.loads_surrogatepass(data)


def test_keys_that_differ_only_in_a_surrogate_stay_apart_when_made_writable() -> None:
    """U+FFFD made `report-\\udce9.txt` and `report-\\udce8.txt` one key, and
    one of their values was lost (review)."""
    written = encodable({E9: 1, E8: 2, "v": E9, "pair" + PAIR: 3})
    assert written == {
        "report-\\udce9.txt": 1,
        "report-\\udce8.txt": 2,
        "v": "report-\ufffd.txt",
        "pair\U0001f600": 3,
    }
    orjson.dumps(written)
    assert key_of("plain") == "plain"
    # A key spelling the escape out already: numbered, not merged.
    spelled = "report-\\udce9.txt"
    assert encodable({E9: 1, spelled: 2}) == {f"{spelled} (2)": 1, spelled: 2}
    assert encodable({spelled: 2, E9: 1}) == {spelled: 2, f"{spelled} (2)": 1}


def test_encodable_of_a_long_list_agrees_wherever_the_surrogate_is() -> None:
    for where in (0, 256, 999):
        rows: list[Any] = [{"name": f"f{i}"} for i in range(1000)]
        rows[where] = {E9: E8}
        expected = [dict(r) for r in rows]
        expected[where] = {"report-\\udce9.txt": "report-\ufffd.txt"}
        assert encodable(rows) == expected
