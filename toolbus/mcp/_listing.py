"""A tool list the SDK refuses as a whole, said in one line.

The `mcp` SDK checks a `tools/list` reply as one `ListToolsResult`, in its
`send_request`, before any caller sees it: one tool it cannot read (an
`inputSchema` that is no object's, `{"type": "string"}`) fails the whole
page, whatever result type it is asked for, and so toolbus cannot leave
that one tool out and mount the others (as it does a tool whose schema the
SDK reads but toolbus cannot use). What it can do is say which tool and
which rule, never the value, instead of pydantic's multi-line dump.
"""

from __future__ import annotations

import pydantic

from ._errors import field_at

__all__ = ["ListingRefused", "refused_listing"]


class ListingRefused(ValueError):
    """The server's tool list, refused by the SDK as a whole."""


def refused_listing(error: pydantic.ValidationError) -> ListingRefused:
    """One line for `error`: each tool (by its place) and the first rule it breaks."""
    found: dict[str, str] = {}
    for problem in error.errors(include_url=False):
        loc = [p for p in problem["loc"] if not (isinstance(p, str) and "[" in p)]
        if loc[:1] == ["tools"] and len(loc) > 1 and isinstance(loc[1], int):
            where, inside = f"tool #{loc[1]}", loc[2:]
        else:
            where, inside = "the listing", loc
        if where in found:
            continue
        rule = "is missing (required)" if problem["type"] == "missing" else problem["msg"]
        value = problem.get("input")
        if isinstance(value, str | int | float) and str(value) in rule:
            rule = f"is not valid ({problem['type']})"
        found[where] = (
            f"{where}: {field_at(inside, 'it')} {rule.replace('Input should', 'should', 1)}"
        )
    listed = list(found.values())
    more = f"; and {len(listed) - 3} more" if len(listed) > 3 else ""
    return ListingRefused(
        f"its tool list is one the mcp SDK refuses as a whole, so none of its tools can be "
        f"mounted ({'; '.join(listed[:3])}{more})"
    )
