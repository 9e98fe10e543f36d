"""How the scanner walks a value (`toolbus/scanning/_walk.py`): its texts are
scanned together, which finds what scanning each alone finds; one walk gives
the scanned copy and the first `block`; and what a walk copies or keeps."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from tests.scanning.generate import Planter
from toolbus import ToolCall, ToolContext, ToolRegistry, bus
from toolbus.models import ToolResult
from toolbus.scanning import ContentScanner
from toolbus.scanning._walk import UNREADABLE, Gather, gather, walk

CORPUS = Path(__file__).parent / "corpus"


def _outputs() -> list[Any]:
    out: list[Any] = []
    for name in ("planted.jsonl", "ordinary.jsonl", "lookalikes.jsonl"):
        for line in (CORPUS / name).read_text(encoding="utf-8").splitlines():
            out.append(json.loads(line)["output"])
    return out


def _strings(value: Any) -> list[str]:
    texts: list[str] = []
    gather(value, None, texts, {})
    return texts


def test_texts_scanned_together_are_scanned_as_each_alone(scanner: ContentScanner) -> None:
    """Joined a KB a scan, the texts of a value are found in as each alone
    would be: nothing is lost where one text ends and the next begins, and a
    match across two texts counts for neither."""
    seed = 20261204
    print(f"walk seed {seed}")
    rng = random.Random(seed)
    texts = [t for output in _outputs() for t in _strings(output)]
    planter = Planter(seed)
    for _ in range(40):
        output, _planted = planter.document(3)
        texts += _strings(output)
    # Texts that end the way a rule's end is written (`$`, `\z`), or hold newlines.
    texts += ["sntrys_eyJpYXQiOjE3" + "a" * 20, "key AKIAZ7Q3J2XW5NPLM4RT", "x\n\ny", ""]
    rng.shuffle(texts)
    at = 0
    while at < len(texts):
        n = rng.choice((2, 5, 40, 300))
        batch, at = texts[at : at + n], at + n
        assert scanner.value(batch) == [scanner.text(t) for t in batch]


def test_the_lean_gathering_walk_meets_the_texts_the_building_one_does() -> None:
    class Shown:
        def __str__(self) -> str:
            return "shown 4111 1111 1111 1111"

    class Unreadable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    values: list[Any] = _outputs()
    values.append(
        {
            ("tuple", "key"): [Shown(), Unreadable(), b"bytes", 1.5, None, True],
            7: {"card_number": 4111111111111111, "id": 4111111111111111},
            "proxy": MappingProxyType({"password": "hunter22", "k": (1, "two")}),
            "nested": [[["deep"]]],
        }
    )
    for value in values:
        texts: list[str] = []
        keyed: dict[int, str] = {}
        gather(value, None, texts, keyed)
        reference = Gather()
        walk(value, None, reference)
        assert (texts, keyed) == (reference.texts, reference.keyed)


def test_one_walk_gives_the_scanned_copy_and_the_first_block() -> None:
    s = ContentScanner(engine="re", actions={"card": "block"})
    value = {"a": "mail jane@example.org", "b": ["card 4111 1111 1111 1111", "x"], "c": "ok"}
    scanned, found = s.scan(value)
    assert scanned == {"a": "mail [REDACTED:email]", "b": ["card [REDACTED:card]", "x"], "c": "ok"}
    assert found is not None and (found.rule, found.action) == ("card-number", "block")
    assert s.blocking(value) == found
    plain = {"a": [1, 2], "b": "nothing here"}
    assert s.scan(plain) == (plain, None) and s.scan(plain)[0] is plain


def test_an_object_that_shows_a_blocked_value_blocks() -> None:
    """An object's text counts for blocking as it does for publishing: it was
    redacted, not blocked (found by review)."""

    class Holder:
        def __str__(self) -> str:
            return "holder of 4111 1111 1111 1111"

    s = ContentScanner(engine="re", actions={"card": "block"})
    found = s.blocking({"held": [Holder()]})
    assert found is not None and found.kind == "card"
    result = ToolResult(call_id="c", name="t", status="ok", output={"held": Holder()})
    checked, found = s.checked(result)
    assert found is not None and checked.output == {"held": "holder of [REDACTED:card]"}


def test_keys_redacted_alike_keep_both_values() -> None:
    s = ContentScanner(engine="re")
    out = s.value({"ada@example.org": 1, "bob@example.org": 2, "n": 3})
    assert sorted(out.values()) == [1, 2, 3] and len(out) == 3
    assert "[REDACTED:email]" in out


def test_keys_that_are_not_strings_show_their_text() -> None:
    s = ContentScanner(engine="re")
    out = s.value({("jane@example.org", 1): "v", b"x": "w", 3: "z"})
    assert out == {"('[REDACTED:email]', 1)": "v", b"x": "w", 3: "z"}
    assert s.value({"x": _Unreadable()}) == {"x": UNREADABLE}


class _Unreadable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_allow_and_the_key_value_action_apply_to_values_under_secret_keys() -> None:
    """`allow` did not apply to a value under a secret key, and its rule id
    could not be given an action (found by review)."""
    value = {"api_key": "test_Zx9kQ2vL7pW3mN8b"}
    assert ContentScanner(engine="re", allow=[r"test_\w+"]).value(value) == value
    s = ContentScanner(engine="re", actions={"secret-key-value": "block"})
    found = s.blocking(value)
    assert found is not None and found.rule == "secret-key-value"
    masked = ContentScanner(engine="re", actions={"secret-key-value": "mask"})
    assert masked.value(value) == {"api_key": "****_************mN8b"}


def test_a_scanners_actions_are_fixed_when_it_is_made() -> None:
    """Changing `actions` after construction was half applied (found by review)."""
    s = ContentScanner(engine="re", actions={"card": "block"})
    with pytest.raises(TypeError):
        s.actions["email"] = "block"  # type: ignore[index]
    with pytest.raises(AttributeError):
        s.default = "block"  # type: ignore[misc]
    assert s.blocking("mail jane@example.org") is None


def test_progress_with_a_cyclic_detail_neither_fails_the_tool_nor_shows(
    make_executor: MakeExecutor,
) -> None:
    """A cyclic `progress` detail, with a known secret to scrub, raised
    RecursionError out of `ctx.progress` into the tool (found by review)."""
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def work(ctx: ToolContext, password: str) -> str:
        detail: dict[str, Any] = {"n": 1}
        detail["self"] = detail
        ctx.progress("step for jane@example.org", 0.5, detail=detail)
        ctx.progress("keys", 0.9, seen={("jane@example.org",): 1, 5: b"x"})
        return "done"

    ex = make_executor(registry, scanner=ContentScanner(engine="re"))
    with bus.Recorder(bus.PROGRESS, sender=ex) as rec:
        result = ex.execute(ToolCall(name="work", arguments={"password": "hunter22hunter22"}))
        assert ex.drain_events()
    assert (result.status, result.output) == ("ok", "done"), result.error
    first, second = rec.of(bus.PROGRESS)
    assert first.message == "step for [REDACTED:email]"
    assert first.data == "[REDACTED:unscannable]"
    assert second.data == {"seen": {"('[REDACTED:email]',)": 1, 5: b"x"}}


def test_keys_redacted_like_a_later_key_keep_both_values() -> None:
    """(found by review) a redacted key equal to a key after it lost a value."""
    s = ContentScanner(engine="re")
    out = s.value({"a@x.org": 1, "[REDACTED:email]": 2})
    assert sorted(out.values()) == [1, 2] and "[REDACTED:email]" in out
    out = s.value({"a@x.org": 1, "b@x.org": 2, "[REDACTED:email] (1)": 3})
    assert sorted(out.values()) == [1, 2, 3]


def test_a_text_moved_under_a_password_key_between_the_walks_is_redacted() -> None:
    """The second walk matched texts by position and text only: a value
    changed between the walks could put a password under its key unscanned
    (found by review)."""
    value: list[Any] = []

    class Flip:
        calls = 0

        def __str__(self) -> str:
            Flip.calls += 1
            if Flip.calls == 2:  # the second walk: what follows moves under a key
                value[1] = {"password": "hunter2!x"}
            return "status"

    value.extend([Flip(), ["password", "hunter2!x"], "jane.doe@example.org"])
    out = ContentScanner(engine="re").value(value)
    assert out[1] == {"password": "[REDACTED:secret]"} and out[2] == "[REDACTED:email]"


def test_a_decimal_counts_as_a_number(scanner: ContentScanner) -> None:
    from decimal import Decimal

    ids = {"id": Decimal(4111111111111111), "card": Decimal("4111111111111111")}
    assert scanner.value(ids) == {"id": Decimal(4111111111111111), "card": "[REDACTED:card]"}


def test_to_model_is_fixed_when_the_scanner_is_made() -> None:
    s = ContentScanner(engine="re")
    with pytest.raises(AttributeError):
        s.to_model = True  # type: ignore[misc]


def test_confirming_from_the_first_candidate_finds_every_match(scanner: ContentScanner) -> None:
    """Python's re starts where a match could first begin (hyperscan's first
    candidate's end less the rule's longest match): every match is still
    found, the first at the text's very start and the last at its end."""
    card, email = "4111 1111 1111 1111", "jane@example.org"
    text = f"{card} " + "ordinary words and 12 digits " * 200 + f"{email} {card}"
    assert scanner.text(text).count("[REDACTED:card]") == 2
    assert scanner.text(text).endswith("[REDACTED:email] [REDACTED:card]")
    rows = [f"row {i}" for i in range(300)] + [text]
    assert scanner.value(rows)[-1] == scanner.text(text)


def test_a_huge_decimal_under_a_card_key_is_quick() -> None:
    """`int(Decimal("1E+1000000"))` took a minute (found by review)."""
    from decimal import Decimal

    s = ContentScanner(engine="re")
    value = {"card_number": Decimal("1E+1000000"), "card": Decimal("NaN")}
    assert s.value(value) is value
