"""Unit tests for `toolbus.formatting`: the text a model reads for a result."""

from __future__ import annotations

from typing import Any

import pytest

from toolbus import _json
from toolbus.formatting import format_result_for_context, output_text
from toolbus.models import Attachment, ErrorCode, Status, ToolResult


def _result(**kw: Any) -> ToolResult:
    base: dict[str, Any] = {"call_id": "call_1", "name": "get_weather", "status": "ok"}
    base.update(kw)
    return ToolResult(**base)


# -- output_text -----------------------------------------------------------------------


def test_output_text_string_as_is() -> None:
    assert output_text("plain\ntext") == "plain\ntext"
    assert output_text("") == ""


def test_output_text_json_indented() -> None:
    assert output_text({"a": 1, "b": [1, 2]}) == '{\n  "a": 1,\n  "b": [\n    1,\n    2\n  ]\n}'


def test_output_text_scalars_and_none() -> None:
    assert output_text(None) == "null"
    assert output_text(42) == "42"
    assert output_text(True) == "true"
    assert output_text([]) == "[]"


def test_output_text_non_str_keys_and_unknown_types() -> None:
    class Thing:
        def __str__(self) -> str:
            return "a thing"

    assert output_text({1: "one"}) == '{\n  "1": "one"\n}'
    assert output_text([Thing()]) == '[\n  "a thing"\n]'


# -- format_result_for_context: ok -----------------------------------------------------


def test_ok_string_output_with_metadata() -> None:
    r = _result(output="Sunny, 21 C", attempts=1, duration=0.25)
    assert format_result_for_context(r) == (
        "Tool: get_weather\nStatus: Success\nDuration: 250ms\n---\nSunny, 21 C"
    )


def test_ok_without_metadata_is_only_content() -> None:
    r = _result(output="Sunny, 21 C", attempts=3, duration=1.0)
    assert format_result_for_context(r, include_metadata=False) == "Sunny, 21 C"


def test_ok_dict_output_is_indented_json() -> None:
    r = _result(output={"city": "Oslo", "temperature": 4, "tags": ["cold"]}, attempts=1)
    assert format_result_for_context(r) == (
        "Tool: get_weather\n"
        "Status: Success\n"
        "---\n"
        "{\n"
        '  "city": "Oslo",\n'
        '  "temperature": 4,\n'
        '  "tags": [\n'
        '    "cold"\n'
        "  ]\n"
        "}"
    )


def test_ok_none_output_says_no_output() -> None:
    # The same text the provider writers send (`result_text`): never empty, never "null".
    assert format_result_for_context(_result(), include_metadata=False) == "(no output)"
    assert format_result_for_context(_result(output=""), include_metadata=False) == "(no output)"
    assert format_result_for_context(_result()).endswith("---\n(no output)")


def test_zero_duration_omits_duration_line() -> None:
    text = format_result_for_context(_result(output="x", duration=0.0))
    assert "Duration" not in text
    assert text == "Tool: get_weather\nStatus: Success\n---\nx"


@pytest.mark.parametrize(
    ("duration", "shown"),
    [
        (1.2346, "1235ms"),
        (0.25, "250ms"),
        (0.01, "10ms"),
        (0.0042, "4.2ms"),
        (0.00005, "0.1ms"),
    ],
)
def test_duration_in_milliseconds(duration: float, shown: str) -> None:
    # Whole milliseconds from 10 ms up, one decimal below, so sub-ms calls are readable.
    text = format_result_for_context(_result(output="x", duration=duration))
    assert text.split("\n")[2] == f"Duration: {shown}"


@pytest.mark.parametrize(("attempts", "shown"), [(0, False), (1, False), (2, True), (5, True)])
def test_attempts_line_only_when_more_than_one(attempts: int, shown: bool) -> None:
    text = format_result_for_context(_result(output="x", attempts=attempts))
    assert (f"Attempts: {attempts}" in text) is shown
    if shown:
        assert text == f"Tool: get_weather\nStatus: Success\nAttempts: {attempts}\n---\nx"


def test_metadata_line_order() -> None:
    r = _result(output="x", attempts=3, duration=0.5)
    assert format_result_for_context(r).split("\n") == [
        "Tool: get_weather",
        "Status: Success",
        "Duration: 500ms",
        "Attempts: 3",
        "---",
        "x",
    ]


# -- truncation ------------------------------------------------------------------------


def test_no_truncation_at_exact_limit() -> None:
    r = _result(output="a" * 100)
    assert format_result_for_context(r, max_length=100, include_metadata=False) == "a" * 100


def test_truncation_note_with_exact_omitted_count() -> None:
    r = _result(output="a" * 60 + "b" * 41)
    text = format_result_for_context(r, max_length=60, include_metadata=False)
    assert text == "a" * 60 + "\n... (truncated, 41 characters omitted)"


def test_truncation_default_limit_4000() -> None:
    r = _result(output="x" * 4500)
    text = format_result_for_context(r, include_metadata=False)
    assert text == "x" * 4000 + "\n... (truncated, 500 characters omitted)"


def test_truncation_applies_to_json_text() -> None:
    output = {"k": "v" * 50}
    full = output_text(output)
    r = _result(output=output)
    text = format_result_for_context(r, max_length=20, include_metadata=False)
    assert text == full[:20] + f"\n... (truncated, {len(full) - 20} characters omitted)"


def test_truncation_with_metadata_keeps_header() -> None:
    r = _result(output="0123456789", attempts=2)
    assert format_result_for_context(r, max_length=4) == (
        "Tool: get_weather\nStatus: Success\nAttempts: 2\n---\n"
        "0123\n... (truncated, 6 characters omitted)"
    )


def test_truncation_counts_characters_not_bytes() -> None:
    r = _result(output="é" * 10)
    text = format_result_for_context(r, max_length=3, include_metadata=False)
    assert text == "ééé\n... (truncated, 7 characters omitted)"


# -- attachments -----------------------------------------------------------------------


def test_attachments_listed_after_content() -> None:
    r = _result(
        output="Map attached.",
        attachments=(
            Attachment(type="image/png", url="https://maps.example/oslo.png", title="Oslo"),
            Attachment(type="image/png", url="https://maps.example/x.png"),
            Attachment(type="application/pdf", data="JVBERi0="),
        ),
    )
    assert format_result_for_context(r, include_metadata=False) == (
        "Map attached.\n"
        "[attachment: image/png Oslo]\n"
        "[attachment: image/png https://maps.example/x.png]\n"
        "[attachment: application/pdf]"
    )


def test_lone_surrogates_are_written_as_replacement_characters() -> None:
    """A tool's output or error holding a lone surrogate (a file name decoded
    with surrogateescape) was handed on as it was: the model's next request
    could not be encoded, and the agent run raised UnicodeEncodeError (bug hunt)."""
    name = b"report-\xe9.txt".decode("utf-8", "surrogateescape")
    page = Attachment(type="text/plain", url="https://files.example/x", title=name)
    ok = _result(name=f"list_{name}", output={name: [name]}, attachments=(page,))
    failed = _result(status="error", error=f"cannot open {name}", error_code="TOOL_ERROR")
    for r in (ok, failed):
        for metadata in (True, False):
            text = format_result_for_context(r, include_metadata=metadata)
            assert "report-\ufffd.txt" in text
            text.encode()  # (raised before)
    assert format_result_for_context(failed, include_metadata=False) == (
        "Error: cannot open report-\ufffd.txt (TOOL_ERROR)"
    )
    assert format_result_for_context(_result(output="\ud83d\ude00")).endswith("\U0001f600")


def test_keys_that_differ_only_in_a_lone_surrogate_stay_two_in_the_models_text() -> None:
    """Both became `report-\ufffd.txt`: the model read one key, and one of
    the values was lost (review). A key's surrogate is written as its escape."""
    e9 = b"report-\xe9.txt".decode("utf-8", "surrogateescape")
    e8 = b"report-\xe8.txt".decode("utf-8", "surrogateescape")
    r = _result(output={e9: 1, e8: 2, "name": e9})
    assert format_result_for_context(r, include_metadata=False) == (
        '{\n  "report-\\\\udce9.txt": 1,\n  "report-\\\\udce8.txt": 2,\n'
        '  "name": "report-\ufffd.txt"\n}'
    )


def test_a_lone_surrogate_beside_a_long_integer_is_written_as_a_replacement_character() -> None:
    """The integer sent `dumps` to its fallback, which raised UnicodeEncodeError
    for the surrogate (not the TypeError its callers handle): the model's text
    for such an output raised (bug hunt)."""
    name = b"report-\xe9.txt".decode("utf-8", "surrogateescape")
    r = _result(output={"size": 2**70, "name": name})
    assert format_result_for_context(r, include_metadata=False) == (
        '{\n  "size": 1180591620717411303424,\n  "name": "report-\ufffd.txt"\n}'
    )
    with pytest.raises(TypeError, match="surrogates not allowed"):
        _json.dumps({"size": 2**70, "name": name})


# -- errors ----------------------------------------------------------------------------


def test_error_with_code() -> None:
    r = _result(
        status="error",
        error="ConnectionError: refused",
        error_code=ErrorCode.TOOL_ERROR,
        attempts=3,
        duration=2.0,
    )
    assert format_result_for_context(r) == (
        "Tool: get_weather\n"
        "Status: Failed\n"
        "Duration: 2000ms\n"
        "Attempts: 3\n"
        "---\n"
        "Error: ConnectionError: refused (TOOL_ERROR)"
    )


def test_error_without_metadata() -> None:
    r = _result(status="rejected", error="bad args", error_code=ErrorCode.INVALID_ARGUMENTS)
    assert format_result_for_context(r, include_metadata=False) == (
        "Error: bad args (INVALID_ARGUMENTS)"
    )


def test_error_without_code_or_text() -> None:
    r = _result(status="error")
    assert format_result_for_context(r, include_metadata=False) == "Error: unknown error"
    r = _result(status="error", error="boom")
    assert format_result_for_context(r, include_metadata=False) == "Error: boom"


def test_error_ignores_output_and_attachments() -> None:
    r = _result(
        status="error",
        output="partial",
        error="boom",
        attachments=(Attachment(type="image/png", url="u"),),
    )
    assert format_result_for_context(r, include_metadata=False) == "Error: boom"


@pytest.mark.parametrize(
    ("status", "text", "code"),
    [
        ("error", "Failed", ErrorCode.TOOL_ERROR),
        ("timeout", "Timed out", ErrorCode.EXECUTION_TIMEOUT),
        ("cancelled", "Cancelled", ErrorCode.CANCELLED),
        ("rejected", "Rejected", ErrorCode.TOOL_NOT_FOUND),
    ],
)
def test_status_text(status: Status, text: str, code: ErrorCode) -> None:
    r = _result(status=status, error="why", error_code=code)
    assert format_result_for_context(r) == (
        f"Tool: get_weather\nStatus: {text}\n---\nError: why ({code.value})"
    )


def test_max_length_is_an_integer_of_at_least_one() -> None:
    """0 and below left the model a note that the text was cut and none of it
    (a negative was taken as 0); what every integration refuses when it is
    given, this refuses too."""
    result = _result(output="abc")
    bad: list[tuple[Any, type[Exception]]] = [
        (0, ValueError),
        (-1, ValueError),
        (None, TypeError),
        ("10", TypeError),
        (1.5, TypeError),
    ]
    for value, error in bad:
        with pytest.raises(error, match=r"^format_result_for_context: max_length must be"):
            format_result_for_context(result, max_length=value)
    text = format_result_for_context(result, max_length=1, include_metadata=False)
    assert text == "a\n... (truncated, 2 characters omitted)"
