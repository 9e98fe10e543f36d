"""Parameter descriptions from docstrings (Google, NumPy, Sphinx) in a function
tool's schema; checked against griffe (pydantic-ai's and the Agents SDK's
parser) and docstring_parser where they are installed."""

from __future__ import annotations

import inspect
import logging
from typing import Annotated, Any

import pytest
from pydantic import Field

from toolbus import FunctionTool, Injected, ToolContext, ToolRegistry
from toolbus.providers import anthropic, openai, strict_schema
from toolbus.tools._docstring import parse_docstring

GOOGLE = """Forecast for a city.

    Uses the national weather service.

    Args:
        city (str): The city,
            e.g. Oslo.
        days (int, optional): How many days ahead.
        unit: Celsius or Fahrenheit.

    Returns:
        dict: The forecast.

    Raises:
        ValueError: For an unknown city.
    """

NUMPY = """Forecast for a city.

    Uses the national weather service.

    Parameters
    ----------
    city : str
        The city,
        e.g. Oslo.
    days : int, optional
        How many days ahead.
    unit
        Celsius or Fahrenheit.

    Returns
    -------
    dict
        The forecast.
    """

SPHINX = """Forecast for a city.

    Uses the national weather service.

    :param city: The city,
        e.g. Oslo.
    :param int days: How many days ahead.
    :param unit: Celsius or Fahrenheit.
    :type city: str
    :returns: The forecast.
    :raises ValueError: For an unknown city.
    """

EXPECTED = {
    "city": "The city, e.g. Oslo.",
    "days": "How many days ahead.",
    "unit": "Celsius or Fahrenheit.",
}
STYLES = {"google": GOOGLE, "numpy": NUMPY, "sphinx": SPHINX}


@pytest.mark.parametrize("style", list(STYLES))
def test_each_style_gives_the_descriptions(style: str) -> None:
    doc = parse_docstring(STYLES[style])
    assert doc.params == EXPECTED
    assert doc.description == "Forecast for a city.\n\nUses the national weather service."
    assert doc.summary == "Forecast for a city."


def _normalized(params: dict[str, str]) -> dict[str, str]:
    return {name: " ".join(text.split()) for name, text in params.items()}


@pytest.mark.parametrize("style", list(STYLES))
def test_griffe_reads_the_same(style: str) -> None:
    griffe = pytest.importorskip("griffe")
    logging.getLogger("griffe").setLevel(logging.ERROR)
    sections = griffe.Docstring(inspect.cleandoc(STYLES[style]), lineno=1).parse(style)
    found = {
        p.name: p.description for s in sections if s.kind.value == "parameters" for p in s.value
    }
    assert _normalized(found) == _normalized(parse_docstring(STYLES[style]).params)


@pytest.mark.parametrize("style", list(STYLES))
def test_docstring_parser_reads_the_same(style: str) -> None:
    docstring_parser = pytest.importorskip("docstring_parser")
    styles = {
        "google": docstring_parser.DocstringStyle.GOOGLE,
        "numpy": docstring_parser.DocstringStyle.NUMPYDOC,
        "sphinx": docstring_parser.DocstringStyle.REST,
    }
    parsed = docstring_parser.parse(STYLES[style], style=styles[style])
    found = {p.arg_name.split()[-1]: p.description or "" for p in parsed.params}
    assert _normalized(found) == _normalized(parse_docstring(STYLES[style]).params)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, {}),
        ("", {}),
        ("Just a summary.", {}),
        # A section right under the summary, no blank line.
        ("Summary.\nArgs:\n    x: The x.", {"x": "The x."}),
        # Description on the next line; *args and **kwargs; a nested type.
        (
            "S.\n\nArgs:\n    x:\n        The x.\n    *rest: More.\n"
            "    **opts (dict[str, int]): Options.\n    y (Callable[(int), str]): A call.",
            {"x": "The x.", "rest": "More.", "opts": "Options.", "y": "A call."},
        ),
        # Paragraphs inside a description.
        ("S.\n\nArgs:\n    x: One.\n\n        Two.\n    y: Y.", {"x": "One.\n\nTwo.", "y": "Y."}),
        # Keyword Args count; other sections do not.
        (
            "S.\n\nKeyword Args:\n    k: K.\n\nReturns:\n    r: not a parameter.",
            {"k": "K."},
        ),
        # Entries without text are left out.
        ("S.\n\nArgs:\n    x:\n    y: Y.", {"y": "Y."}),
        # NumPy: several names on one line.
        ("S.\n\nParameters\n----------\nx, y : int\n    Both.\n", {"x": "Both.", "y": "Both."}),
        # Sphinx: other field names for a parameter.
        (":arg a: A.\n:keyword b: B.\n:parameter str c: C.", {"a": "A.", "b": "B.", "c": "C."}),
        # Sphinx: a blank line ends a field unless indented text follows.
        (":param a: A.\n\nAfter the fields.", {"a": "A."}),
        # Mixed styles: the first description of a name wins.
        (
            "S.\n\nArgs:\n    x: Google.\n\n:param x: Sphinx.\n:param y: Y.",
            {"x": "Google.", "y": "Y."},
        ),
    ],
)
def test_edge_cases(doc: str | None, expected: dict[str, str]) -> None:
    assert parse_docstring(doc).params == expected


def test_description_stops_at_the_first_section() -> None:
    assert parse_docstring("Summary.\nArgs:\n    x: The x.").summary == "Summary."
    assert parse_docstring(":param x: X.").description == ""
    assert parse_docstring("Multi\nline summary.\n\nMore.").summary == "Multi line summary."


# -- in a function tool's schema ------------------------------------------------------


def forecast(
    city: str,
    days: Annotated[int, Field(description="From the annotation.", ge=1)] = 1,
    unit: str = Field("C", description="From the default."),
    verbose: bool = False,
) -> dict[str, Any]:
    """Forecast for a city.

    Args:
        city: The city.
        days: From the docstring (the annotation wins).
        unit: From the docstring (the default's Field wins).
        ghost: Not a parameter: ignored.
    """
    return {}


def properties(tool: FunctionTool) -> dict[str, Any]:
    props: dict[str, Any] = tool.schema["properties"]
    return props


def test_schema_has_the_docstrings_descriptions() -> None:
    tool = FunctionTool(forecast)
    props = properties(tool)
    assert props["city"]["description"] == "The city."
    assert props["days"]["description"] == "From the annotation."
    assert props["days"]["minimum"] == 1  # the annotation's other constraints stay
    assert props["unit"]["description"] == "From the default."
    assert "description" not in props["verbose"]  # not documented
    assert "ghost" not in props
    assert tool.description == "Forecast for a city."


@pytest.mark.parametrize("style", list(STYLES))
def test_every_style_reaches_the_schema(style: str) -> None:
    def f(city: str, days: int = 1, unit: str = "C") -> None: ...

    f.__doc__ = STYLES[style]
    tool = FunctionTool(f)
    assert {n: p.get("description") for n, p in properties(tool).items()} == EXPECTED
    assert tool.description == "Forecast for a city."


def test_descriptions_reach_every_export() -> None:
    registry = ToolRegistry([forecast])
    city = "The city."
    assert (
        registry.to_openai()[0]["function"]["parameters"]["properties"]["city"]["description"]
        == city
    )
    assert (
        anthropic.tool_definitions(registry)[0]["input_schema"]["properties"]["city"]["description"]
        == city
    )
    [strict] = openai.chat_tool_definitions(registry, strict=True)
    assert strict["function"]["parameters"]["properties"]["city"]["description"] == city
    assert (
        strict_schema(registry.get("forecast").schema)["properties"]["city"]["description"] == city
    )


def test_context_and_injected_parameters_stay_out() -> None:
    def lookup(query: str, api_key: Annotated[str, Injected], ctx: ToolContext) -> str:
        """Look something up.

        Args:
            query: What to look up.
            api_key: The key (never shown to the model).
            ctx: The call's context.
        """
        return query

    tool = FunctionTool(lookup)
    assert list(properties(tool)) == ["query"]
    assert properties(tool)["query"]["description"] == "What to look up."
    assert tool.injected == ("api_key",)
    assert tool.execute({"query": "q", "api_key": "k"}).output == "q"


def test_explicit_description_keeps_parameter_docs() -> None:
    tool = FunctionTool(forecast, description="Mine.")
    assert tool.description == "Mine."
    assert properties(tool)["city"]["description"] == "The city."


def test_validation_is_unchanged() -> None:
    tool = FunctionTool(forecast)
    assert tool.execute({"city": "Oslo", "days": 2}).status == "ok"
    assert tool.execute({"city": "Oslo", "days": 0}).status == "rejected"
