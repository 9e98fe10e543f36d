"""The `read_artifact` tool a `spill` policy brings: the model pages through a
long output that the policy stored whole.

The policy (`toolbus/policies/_spill.py`) stores and reads the artifacts; this
is only the tool over `Spill.read`. It sits in the tools layer, above the
policies, and reaches the policy through the seam `_seams.spill_reader`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .._errors import ToolFailure
from ..models import ToolOutput
from ._function import FunctionTool
from ._tool import Tool

if TYPE_CHECKING:
    from ..policies import Spill

__all__ = ["reader_tool"]


def reader_tool(policy: Spill) -> Tool:
    """The `read_artifact` tool of `policy`: pages of the outputs it spilled."""

    def read_artifact(handle: str, offset: int = 0, length: int = policy.page) -> ToolOutput:
        try:
            text, chars = policy.read(handle, offset, length, time.monotonic())
        except (LookupError, ValueError) as e:
            raise ToolFailure(str(e)) from None
        end = offset + len(text)
        # The model reads the page as it is (pages join into the whole text);
        # where it ends is in the metadata, for whoever pages programmatically.
        return ToolOutput(
            content=text,
            metadata={"artifact": handle, "offset": offset, "next_offset": end,
                      "chars": chars, "done": end >= chars},
        )  # fmt: skip

    tool = FunctionTool(
        read_artifact,
        name=policy.tool_name,
        description=(
            "Read part of a long tool output that was stored as an artifact: "
            f"`length` characters (at most {policy.page}) from character `offset` "
            "(0 is the first) of the artifact `handle` named in that output."
        ),
        read_only=True,
        backend="thread",  # it reads this process's artifacts, whatever the default
    )
    tool.process_local = True
    return tool
