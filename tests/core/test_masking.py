"""Unit tests for `toolbus.masking`: masking arguments and scrubbing text."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import MakeExecutor
from toolbus import Attachment, ToolCall, ToolOutput, ToolRegistry, ToolResult
from toolbus.masking import (
    MASK,
    MIN_SCRUB_LENGTH,
    SECRET_KEY_WORDS,
    Scrubber,
    cleaned_result,
    hidden_values,
    is_secret_key,
    mask_arguments,
    published_arguments,
    scrub_published,
)
from toolbus.scanning import ContentScanner

# -- is_secret_key ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "token",
        "access_token",
        "refresh-token",
        "X-Api-Key",
        "api_key",
        "api-key",
        "APIKEY",
        "ApiKey",
        "Authorization",
        "authorization",
        "bearer_token",
        "Bearer",
        "Set-Cookie",
        "cookie",
        "credentials",
        "Credential",
        "private_key",
        "PRIVATE-KEY",
        "private key",
        "passwd",
        "password",
        "db_password",
        "client_secret",
        "SECRET",
        "x-auth-token",
        "github_token",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key) is True


@pytest.mark.parametrize(
    "key",
    [
        "city",
        "name",
        "query",
        "user",
        "username",
        "session",
        "id",
        "",
        "pass",
        "api",
    ],
)
def test_non_secret_keys(key: str) -> None:
    assert is_secret_key(key) is False


def test_substring_match_flags_tokenizer_and_similar_keys() -> None:
    # Matching is by substring after normalisation, so harmless keys that merely
    # contain a secret word are masked too. This over-masks on purpose (safe side).
    assert is_secret_key("tokenizer") is True
    assert is_secret_key("max_tokens") is True
    assert is_secret_key("secretary") is True
    assert is_secret_key("cookie_policy_url") is True


@pytest.mark.parametrize("key", [None, 1, 2.5, ("token",), b"token", True])
def test_non_string_keys_are_never_secret(key: object) -> None:
    assert is_secret_key(key) is False


def test_every_secret_word_is_recognised() -> None:
    for word in SECRET_KEY_WORDS:
        assert is_secret_key(word)
        assert is_secret_key(word.upper())
        assert is_secret_key(f"my_{word}_value")


# -- mask_arguments --------------------------------------------------------------------


def test_mask_flat() -> None:
    masked, hidden = mask_arguments({"city": "Oslo", "api_key": "sk-live-1234", "n": 3})
    assert masked == {"city": "Oslo", "api_key": MASK, "n": 3}
    assert hidden == ["sk-live-1234"]


def test_mask_nothing_secret() -> None:
    args = {"city": "Oslo", "days": [1, 2], "opts": {"unit": "c"}}
    masked, hidden = mask_arguments(args)
    assert masked == args
    assert hidden == []


def test_mask_nested_dicts() -> None:
    args = {"request": {"headers": {"Authorization": "Bearer abc.def", "Accept": "json"}}}
    masked, hidden = mask_arguments(args)
    assert masked == {"request": {"headers": {"Authorization": MASK, "Accept": "json"}}}
    assert hidden == ["Bearer abc.def"]


def test_mask_lists_of_dicts() -> None:
    args = {
        "accounts": [
            {"user": "a", "password": "pw-one-111"},
            {"user": "b", "password": "pw-two-222"},
            {"user": "c"},
        ]
    }
    masked, hidden = mask_arguments(args)
    assert masked == {
        "accounts": [
            {"user": "a", "password": MASK},
            {"user": "b", "password": MASK},
            {"user": "c"},
        ]
    }
    assert hidden == ["pw-one-111", "pw-two-222"]


def test_mask_secret_key_holding_dict_hides_all_leaves() -> None:
    args = {
        "credentials": {"user": "alice", "pass": "s3cr3t!!", "extra": {"otp": 123456}},
        "city": "Oslo",
    }
    masked, hidden = mask_arguments(args)
    assert masked == {"credentials": MASK, "city": "Oslo"}
    assert hidden == ["alice", "s3cr3t!!", "123456"]


def test_mask_secret_key_holding_list_hides_all_leaves() -> None:
    args = {"tokens": ["tok-aaaa", ["tok-bbbb", {"x": "tok-cccc"}], 42, 1.5]}
    masked, hidden = mask_arguments(args)
    assert masked == {"tokens": MASK}
    assert hidden == ["tok-aaaa", "tok-bbbb", "tok-cccc", "42", "1.5"]


def test_mask_secret_key_with_none_is_left_as_none() -> None:
    masked, hidden = mask_arguments({"token": None, "city": None})
    assert masked == {"token": None, "city": None}
    assert hidden == []


def test_mask_secret_bool_and_none_leaves_are_masked_not_remembered() -> None:
    masked, hidden = mask_arguments({"token": True, "secret": {"a": None, "b": False, "c": "v"}})
    assert masked == {"token": MASK, "secret": MASK}
    assert hidden == ["v"]


def test_mask_secret_number_remembered_as_text() -> None:
    masked, hidden = mask_arguments({"pin_token": 987654, "ratio_secret": 0.25})
    assert masked == {"pin_token": MASK, "ratio_secret": MASK}
    assert hidden == ["987654", "0.25"]


def test_mask_empty_containers_under_secret_key() -> None:
    masked, hidden = mask_arguments({"token": {}, "secret": [], "password": ""})
    assert masked == {"token": MASK, "secret": MASK, "password": MASK}
    assert hidden == [""]


def test_mask_top_level_list_and_tuple() -> None:
    masked, hidden = mask_arguments([{"token": "abcdefgh"}, ({"secret": "ijklmnop"},)])
    assert masked == [{"token": MASK}, [{"secret": MASK}]]
    assert hidden == ["abcdefgh", "ijklmnop"]


@pytest.mark.parametrize("value", ["text", 12, 1.5, None, True])
def test_mask_scalars_pass_through(value: Any) -> None:
    assert mask_arguments(value) == (value, [])


def test_mask_deep_nesting() -> None:
    args: dict[str, Any] = {"level": 0}
    node = args
    for depth in range(1, 30):
        node["child"] = {"level": depth}
        node = node["child"]
    node["client_secret"] = "deep-secret-value"
    masked, hidden = mask_arguments(args)
    assert hidden == ["deep-secret-value"]
    node = masked
    for _ in range(29):
        node = node["child"]
    assert node == {"level": 29, "client_secret": MASK}


def test_mask_does_not_mutate_original() -> None:
    args: dict[str, Any] = {
        "headers": {"X-Api-Key": "key-12345678"},
        "items": [{"token": "t-12345678"}, {"n": 1}],
        "credentials": {"user": "u", "pass": ["p1", "p2"]},
    }
    before = copy.deepcopy(args)
    masked, _ = mask_arguments(args)
    assert args == before
    # The masked copy shares no containers with the original.
    assert masked["headers"] is not args["headers"]
    assert masked["items"] is not args["items"]
    assert masked["items"][1] is not args["items"][1]
    masked["items"][1]["n"] = 99
    assert args["items"][1]["n"] == 1


def test_mask_non_string_keys_kept() -> None:
    masked, hidden = mask_arguments({1: "one", "token": "abcd1234"})
    assert masked == {1: "one", "token": MASK}
    assert hidden == ["abcd1234"]


# -- hidden_values ---------------------------------------------------------------------


def test_hidden_values_nothing_changed() -> None:
    raw = {"a": 1, "b": ["x", {"c": "y"}]}
    assert hidden_values(raw, copy.deepcopy(raw)) == []


def test_hidden_values_custom_partial_mask() -> None:
    raw = {"card": "4111111111111111", "name": "Ann", "amount": 12}
    masked = {"card": "************1111", "name": "Ann", "amount": 12}
    assert hidden_values(raw, masked) == ["4111111111111111"]


def test_hidden_values_key_dropped() -> None:
    raw = {"user": "ann", "session": {"id": "sess-9999", "n": 2}}
    masked = {"user": "ann"}
    assert hidden_values(raw, masked) == ["sess-9999", "2"]


def test_hidden_values_dict_replaced_by_scalar() -> None:
    raw = {"auth": {"user": "ann", "pw": "hunter22"}}
    masked = {"auth": "[redacted]"}
    assert hidden_values(raw, masked) == ["ann", "hunter22"]


def test_hidden_values_list_length_changed_hides_whole_list() -> None:
    raw = {"keys": ["k-111111", "k-222222"]}
    masked = {"keys": ["k-111111"]}
    assert hidden_values(raw, masked) == ["k-111111", "k-222222"]


def test_hidden_values_list_elementwise() -> None:
    raw = {"keys": ["k-111111", "k-222222", None, True]}
    masked = {"keys": ["k-111111", MASK, MASK, MASK]}
    assert hidden_values(raw, masked) == ["k-222222"]


def test_hidden_values_tuple_vs_list_compared_elementwise() -> None:
    assert hidden_values(("a", "bbbb"), ["a", "xxxx"]) == ["bbbb"]


def test_hidden_values_numbers() -> None:
    assert hidden_values({"pin": 123456}, {"pin": 0}) == ["123456"]
    assert hidden_values({"pin": 5}, {"pin": 5.0}) == []


def test_hidden_values_matches_mask_arguments() -> None:
    raw = {"headers": {"Authorization": "Bearer xyz123"}, "q": "hello", "tokens": ["a1b2c3d4"]}
    masked, hidden = mask_arguments(raw)
    assert hidden_values(raw, masked) == hidden


# -- Scrubber --------------------------------------------------------------------------


def test_empty_scrubber_is_falsy_and_identity() -> None:
    s = Scrubber()
    assert not s
    assert s.values == ()
    text = "nothing to hide"
    assert s.text(text) is text
    value = {"a": ["b", 1]}
    assert s.value(value) is value


def test_scrubber_ignores_short_values() -> None:
    assert MIN_SCRUB_LENGTH == 4
    s = Scrubber(["", "a", "ab", "abc"])
    assert not s
    assert s.text("abc abc") == "abc abc"
    s = Scrubber(["abc", "abcd"])
    assert s
    assert s.values == ("abcd",)
    assert s.text("abc abcd abcde") == f"abc {MASK} {MASK}e"


def test_scrubber_text_replaces_every_occurrence() -> None:
    s = Scrubber(["sk-1234", "hunter2"])
    assert (
        s.text("key sk-1234 failed; retried sk-1234 with hunter2")
        == f"key {MASK} failed; retried {MASK} with {MASK}"
    )


def test_scrubber_longest_first() -> None:
    s = Scrubber(["abcd", "abcdefgh"])
    assert s.values == ("abcdefgh", "abcd")
    assert s.text("x abcdefgh y abcd z") == f"x {MASK} y {MASK} z"
    # Not "***efgh", which is what shortest-first would produce.
    assert "efgh" not in s.text("abcdefgh")


def test_scrubber_deduplicates() -> None:
    s = Scrubber(["same-secret", "same-secret", "other-secret"])
    assert sorted(s.values) == ["other-secret", "same-secret"]


def test_scrubber_escapes_regex_metacharacters() -> None:
    s = Scrubber(["a.b*c+(d)", "[x]{2}|y"])
    assert s.text("a.b*c+(d) and [x]{2}|y and aXbbbc+d") == f"{MASK} and {MASK} and aXbbbc+d"


def test_scrubber_value_nested_json() -> None:
    s = Scrubber(["secret-1", "123456"])
    value = {
        "message": "used secret-1 here",
        "items": ["secret-1", "fine", 123456, 12345, 1.5, True, None],
        "secret-1": {"nested": ("prefix-secret-1",)},
        7: "key is not a string",
        "count": 123456,
    }
    assert s.value(value) == {
        "message": f"used {MASK} here",
        "items": [MASK, "fine", MASK, 12345, 1.5, True, None],
        MASK: {"nested": [f"prefix-{MASK}"]},
        7: "key is not a string",
        "count": MASK,
    }
    # The input is not modified.
    assert value["message"] == "used secret-1 here"


def test_scrubber_value_float_secret() -> None:
    s = Scrubber(["3.14159"])
    assert s.value([3.14159, 2.71828]) == [MASK, 2.71828]


def test_scrubber_value_bool_not_scrubbed() -> None:
    s = Scrubber(["True", "False"])
    assert s.value([True, False, "True"]) == [True, False, MASK]


def test_scrubber_merged() -> None:
    a = Scrubber(["alpha-secret"])
    b = Scrubber(["beta-secret-longer"])
    empty = Scrubber()
    assert a.merged(empty) is a
    assert empty.merged(b) is b
    assert empty.merged(empty) is empty
    m = a.merged(b)
    assert m is not a
    assert m is not b
    assert m.values == ("beta-secret-longer", "alpha-secret")
    assert m.text("alpha-secret/beta-secret-longer") == f"{MASK}/{MASK}"
    # Merging does not change the operands.
    assert a.values == ("alpha-secret",)
    assert b.values == ("beta-secret-longer",)


def test_scrubber_merged_deduplicates_and_orders_longest_first() -> None:
    a = Scrubber(["abcd", "abcdefgh"])
    b = Scrubber(["abcd", "abcdef"])
    assert a.merged(b).values == ("abcdefgh", "abcdef", "abcd")


def test_scrubber_from_mask_arguments_round_trip() -> None:
    _, hidden = mask_arguments({"api_key": "sk-live-abcdef", "pin_token": 42})
    s = Scrubber(hidden)
    assert s.values == ("sk-live-abcdef",)  # "42" is too short to scrub
    assert s.text("401 Unauthorized for key sk-live-abcdef") == f"401 Unauthorized for key {MASK}"


# -- cleaned_result: attachments -------------------------------------------------------

KEY = "sk-live-4f3e2d1c0b"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _cleaned(*attachments: Attachment) -> tuple[Attachment, ...]:
    result = ToolResult(call_id="c", name="t", status="ok", attachments=attachments)
    return cleaned_result(Scrubber([KEY]), result).attachments


@pytest.mark.parametrize(
    ("media_type", "encoding"),
    [
        ("text/plain", "utf-8"),
        ("application/json", "utf-8"),
        ("application/ld+json", "utf-8"),
        ("text/csv; charset=utf-16", "utf-16"),
        ('text/plain; charset="latin-1"', "latin-1"),
        ("application/octet-stream", "utf-8"),  # no text type, but its bytes are UTF-8
    ],
)
def test_a_text_attachments_data_is_scrubbed_as_the_text_it_encodes(
    media_type: str, encoding: str
) -> None:
    text = f"GET /r9?api_key={KEY}\n200 OK, café"
    (a,) = _cleaned(Attachment(type=media_type, data=_b64(text.encode(encoding))))
    assert a.data is not None
    assert base64.b64decode(a.data).decode(encoding) == "GET /r9?api_key=***\n200 OK, café"


@pytest.mark.parametrize(
    "media_type",
    [
        "text/plain; charset=bogus",
        "text/plain; charset=utf-16",
        "text/plain; charset=utf-32",
        "application/json; charset=cp500",
        "text/csv; charset=x-user-defined",
    ],
)
def test_utf8_text_under_a_wrong_or_unknown_charset_is_scrubbed_as_utf8(media_type: str) -> None:
    """The provider writers read a text attachment as UTF-8 whatever its
    charset says: that reading is scrubbed too."""
    raw = f"token={KEY}\n".encode()
    (a,) = _cleaned(Attachment(type=media_type, data=_b64(raw)))
    assert a.data is not None
    assert KEY.encode() not in base64.b64decode(a.data)
    assert KEY not in base64.b64decode(a.data).decode("utf-8", "replace")


@pytest.mark.parametrize(
    ("media_type", "encoding"),
    [("text/plain; charset=utf-16", "utf-16-be"), ("text/plain; charset=utf-8", "utf-16-le")],
)
def test_utf16_text_without_its_byte_order_mark_or_mislabelled_is_scrubbed(
    media_type: str, encoding: str
) -> None:
    """(Found by review: Python reads BOM-less UTF-16 as little-endian, and a
    writer sent the UTF-8 reading, the secret between NULs.)"""
    raw = f"token={KEY}".encode(encoding)
    (a,) = _cleaned(Attachment(type=media_type, data=_b64(raw)))
    assert a.data is not None
    assert base64.b64decode(a.data).decode(encoding) == "token=***"


def test_utf16_text_with_a_stray_byte_is_scrubbed() -> None:
    raw = f"token={KEY} end".encode("utf-16") + b"\x00"  # an odd byte out
    (a,) = _cleaned(Attachment(type="text/plain; charset=utf-16", data=_b64(raw)))
    assert a.data is not None
    assert KEY not in base64.b64decode(a.data).decode("utf-16", "replace")


@pytest.mark.parametrize("charset", ["idna", "punycode", "undefined", "utf\x008", "rot13"])
def test_a_charset_no_text_codec_can_read_leaves_the_call_ok(
    make_executor: MakeExecutor, charset: str
) -> None:
    """A tool (or an MCP server) names any charset: one Python cannot read
    text with, or that raises as it reads, is not the call's failure."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def report(api_key: str) -> ToolOutput:
        data = _b64(b"a report, nothing secret in it")
        return ToolOutput(value="done", attachments=[
            Attachment(type=f"text/plain; charset={charset}", data=data)
        ])  # fmt: skip

    ex = make_executor(reg)
    r = ex.execute(ToolCall(name="report", arguments={"api_key": KEY}))
    assert r.status == "ok", r.error
    assert r.attachments[0].data == _b64(b"a report, nothing secret in it")


def test_a_text_attachment_with_a_stray_byte_is_scrubbed_and_keeps_the_byte() -> None:
    raw = f"key {KEY} then ".encode() + b"\xff\xfe"
    (a,) = _cleaned(Attachment(type="text/plain", data=_b64(raw)))
    assert a.data is not None
    assert base64.b64decode(a.data) == b"key *** then \xff\xfe"


def test_binary_data_and_plain_attachments_are_left_as_they_are() -> None:
    png = b"\x89PNG\r\n\x1a\n" + KEY.encode() + b"\x00\x01"  # no text: no scrubbing
    image = Attachment(type="image/png", data=_b64(png), title="chart")
    doc = Attachment(type="text/plain; charset=utf-8", data=_b64(b"nothing secret"))
    link = Attachment(type="application/vnd.ms-excel", url="https://files.example/r9.xls")
    assert _cleaned(image, doc, link) == (image, doc, link)


def test_an_attachments_type_url_title_and_non_base64_data_are_scrubbed() -> None:
    (a,) = _cleaned(
        Attachment(
            type=f"text/x-{KEY}",
            url=f"https://files.example/r9?key={KEY}",
            title=f"log for {KEY}",
            data=f"plain text, no base64: {KEY}",
        )
    )
    assert a.type == "text/x-***"
    assert a.url == "https://files.example/r9?key=***"
    assert a.title == "log for ***"
    assert a.data == "plain text, no base64: ***"


def test_a_base64_data_url_is_scrubbed_as_the_text_it_encodes() -> None:
    url = f"data:text/plain;base64,{_b64(f'key={KEY}'.encode())}"
    (a,) = _cleaned(Attachment(type="file", url=url))
    assert a.url == f"data:text/plain;base64,{_b64(b'key=***')}"


def test_a_content_scanner_reads_a_text_attachments_data_as_text() -> None:
    token = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    data = _b64(f'{{"github": "{token}"}}'.encode())
    result = ToolResult(
        call_id="c",
        name="t",
        status="ok",
        attachments=(Attachment(type="application/json", data=data),),
    )
    (a,) = cleaned_result(ContentScanner(), result).attachments
    assert a.data is not None
    assert base64.b64decode(a.data) == b'{"github": "[REDACTED:secret]"}'


# -- property: no secret survives masking or scrubbing ---------------------------------

SECRET_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
SECRET_KEYS = [
    "token",
    "api_key",
    "X-Api-Key",
    "Authorization",
    "password",
    "client_secret",
    "credentials",
    "private_key",
    "Set-Cookie",
]

# At least one letter: an all-digit secret could otherwise match a plain number.
secrets_st = st.text(alphabet=SECRET_ALPHABET, min_size=8, max_size=24).filter(
    lambda s: any(c.isalpha() for c in s)
)
# Ordinary data never contains secret-alphabet characters, so a secret can only
# come from an injected value.
plain_text = st.text(
    alphabet=st.characters(blacklist_characters=SECRET_ALPHABET, blacklist_categories=["Cs"]),
    max_size=12,
)
plain_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
    lambda k: not is_secret_key(k)
)
plain_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False), plain_text
)


def _plain_json() -> st.SearchStrategy[Any]:
    return st.recursive(
        plain_leaves,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(plain_keys, children, max_size=4)
        ),
        max_leaves=12,
    )


def _secret_holder(secret: str) -> st.SearchStrategy[Any]:
    """The value placed under a secret key: the secret itself or a container of it."""
    return st.sampled_from(["bare", "list", "dict", "deep"]).map(
        lambda shape: {
            "bare": secret,
            "list": ["x", secret],
            "dict": {"inner": secret, "n": 1},
            "deep": {"a": [{"b": secret}]},
        }[shape]
    )


@st.composite
def _args_with_secrets(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    args = draw(st.dictionaries(plain_keys, _plain_json(), max_size=5))
    secrets = draw(st.lists(secrets_st, min_size=1, max_size=5, unique=True))
    for secret in secrets:
        # Walk down a random path of dicts (creating them as needed), through lists too.
        node: dict[str, Any] = args
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            key = draw(plain_keys)
            child = node.get(key)
            if isinstance(child, list) and draw(st.booleans()):
                holder: dict[str, Any] = {}
                child.append(holder)
                node = holder
            elif isinstance(child, dict):
                node = child
            else:
                fresh: dict[str, Any] = {}
                # Either a plain nested dict or a dict inside a list (of other values).
                if draw(st.booleans()):
                    node[key] = fresh
                else:
                    node[key] = [*draw(st.lists(plain_leaves, max_size=2)), fresh]
                node = fresh
        key = draw(st.sampled_from(SECRET_KEYS))
        node[key] = draw(_secret_holder(secret))
    return args, secrets


def _string_leaves(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_string_leaves(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_string_leaves(v) for v in value))
    return {value} if isinstance(value, str) else set()


@settings(max_examples=150, deadline=None)
@given(_args_with_secrets(), st.data())
def test_no_secret_survives_masking_or_scrubbing(
    case: tuple[dict[str, Any], list[str]], data: st.DataObject
) -> None:
    args, secrets = case
    # Injection may overwrite an earlier secret's holder; only check those still present.
    leaves = _string_leaves(args)
    present = [s for s in secrets if s in leaves]
    assert present, "at least the last injected secret is present"

    masked, hidden = mask_arguments(args)
    dumped = orjson.dumps(masked).decode()
    for secret in present:
        assert secret not in dumped
        assert secret in hidden

    scrubber = Scrubber(hidden)
    pieces = data.draw(st.lists(plain_text, min_size=len(present) + 1, max_size=len(present) + 1))
    text = pieces[0] + "".join(s + p for s, p in zip(present, pieces[1:], strict=True))
    # Secrets glued together too, so overlapping matches are exercised.
    text += "".join(present) + "".join(reversed(present))
    scrubbed = scrubber.text(text)
    for secret in present:
        assert secret not in scrubbed
    # Scrubbing the original arguments as a value hides the secrets as well.
    scrubbed_value = orjson.dumps(scrubber.value(args)).decode()
    for secret in present:
        assert secret not in scrubbed_value


def test_an_integer_longer_than_str_writes_is_kept_not_unscannable() -> None:
    """`str()` of an integer past 4300 digits raises: an output holding one
    was published as "[REDACTED:unscannable]" when the call had a secret
    (review 60)."""
    huge = 10**5000
    s = Scrubber(["sk-live-1234567890"])
    assert s.value({"n": huge, "k": "sk-live-1234567890"}) == {"n": huge, "k": MASK}
    assert scrub_published(s, [huge, -huge]) == [huge, -huge]


def test_a_surrogate_secret_in_bytes_or_their_repr_is_scrubbed() -> None:
    """A secret read with surrogateescape is those bytes in `bytes`; a process
    tool's bytes come to the agent as their repr (review 60)."""
    for secret in ("sk-live-\udce91234567890", "pässwörd-1234"):
        raw = secret.encode("utf-8", "surrogateescape")
        _, s = published_arguments({}, {}, [secret])
        assert s.value({"b": raw}) == {"b": MASK}
        assert s.text(repr(raw)) == f"b'{MASK}'"
