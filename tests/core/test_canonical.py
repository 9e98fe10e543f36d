"""`toolbus._json.canonical`: the bytes idempotency keys, approval digests and
cache keys are made of. Distinct arguments give distinct bytes, and ordinary
arguments the same bytes as ever (keys in journals stay valid)."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson
import pytest

from toolbus._json import canonical
from toolbus.models import ToolCall
from toolbus.pipeline._keys import derive_key

ORDINARY: list[Any] = [
    {"path": "/a", "n": 1, "f": 1.5, "nested": {"z": [1, 2, {"b": None, "a": True}], "é": "ü🙂"}},
    '{ "b": 1,  "a": [1, 2.0, null] }',
    "not json {",
    {"big": 2**70},
    {},
    [],
    {"a": None},
]
# sha256(canonical(v))[:16] as written before NaN and non-string keys were told
# apart: ordinary arguments must keep them.
GOLDEN = [
    "f3508593952ee86a",
    "df04fa4dacb08683",
    "c3f07c17117dc195",
    "ce8e6dd7da637c11",
    "44136fa355b3678a",
    "4f53cda18c2baa0c",
    "d091f9c83c091f79",
]


@pytest.mark.parametrize(("value", "golden"), list(zip(ORDINARY, GOLDEN, strict=True)))
def test_ordinary_arguments_are_written_as_ever(value: Any, golden: str) -> None:
    assert hashlib.sha256(canonical(value)).hexdigest()[:16] == golden


def test_an_idempotency_key_of_ordinary_arguments_is_unchanged() -> None:
    call = ToolCall(id="m1", name="t", arguments={"path": "/a", "n": 1})
    assert derive_key(call, b"k" * 32) == (
        "f3434705ea2a35da6ff4dea38bd75ec80e8ea10c8a1242385fdf8d53fe2be5b0"
    )


def test_text_holding_integers_past_64_bits_keeps_its_old_key() -> None:
    """The key of such text moved when `loads` learned to read 10**400: from
    the text's bytes to its repr, and keys in journals stopped matching
    (review 60). Both old keys pinned."""
    within = '{"n": 12345678901234567890123}'  # 19+ digits, within a double's range
    assert canonical(within) == repr(within).encode()
    for past in ('{"n": 1' + "0" * 400 + "}", "[-" + "9" * 5000 + "]"):
        assert canonical(past) == past.encode()


def test_json_text_and_its_dict_agree() -> None:
    assert canonical('{"b": [1, {"y": null, "x": 2}], "a": "é"}') == canonical(
        {"a": "é", "b": [1, {"x": 2, "y": None}]}
    )
    assert canonical({"a": None}) == orjson.dumps({"a": None})


@pytest.mark.parametrize(
    "group",
    [
        [{"a": None}, {"a": math.nan}, {"a": math.inf}, {"a": -math.inf}, {"a": "#nan"}],
        [{1: "x"}, {"1": "x"}, {"'1": "x"}, {1.5: "x"}, {"1.5": "x"}, {None: "x"}, {"null": "x"}],
        [{"a": [math.nan]}, {"a": [None]}, {"a": ["'#nan"]}, {"a": ("#nan",)}],
        [{"k": {2: [math.inf]}}, {"k": {"2": [math.inf]}}, {"k": {"2": [None]}}],
    ],
)
def test_values_plain_json_would_confuse_are_told_apart(group: list[Any]) -> None:
    written = [canonical(v) for v in group]
    assert len(set(written)) == len(group), written
    for value, data in zip(group, written, strict=True):
        assert data == canonical(value)  # still a function of the value


def test_the_tagged_encoding_never_meets_the_plain_one() -> None:
    tagged = canonical({"a": math.nan})
    assert tagged.startswith(b"\xff")  # never in UTF-8: no JSON text or text argument
    assert not canonical('{"a": null}').startswith(b"\xff")


def test_arguments_holding_an_integer_past_pythons_digit_limit_are_keyed() -> None:
    """`repr` refuses an integer of more than `sys.get_int_max_str_digits()`
    digits: a call from Python holding one ended "internal error: ValueError"
    when its key was made. Inside plain containers it is written whole (as
    `repr` would without the limit), so distinct values key apart."""
    huge = 10**5000
    one = canonical({"x": {"n": huge}, "t": (1,), "s": {2}})
    assert one.startswith(b"{'x': {'n': 1000")
    assert one.endswith(b"}, 't': (1,), 's': {2}}")
    assert canonical({"x": {"n": huge + 1}, "t": (1,), "s": {2}}) != one
    assert derive_key(ToolCall(name="t", arguments={"n": huge}), b"s") != derive_key(
        ToolCall(name="t", arguments={"n": -huge}), b"s"
    )


def test_an_object_holding_such_an_integer_is_refused_by_name() -> None:
    class Holder:
        def __repr__(self) -> str:
            return f"Holder({10**5000})"

    with pytest.raises(TypeError, match="a Holder among the arguments holds an integer of more"):
        canonical({"h": Holder()})
