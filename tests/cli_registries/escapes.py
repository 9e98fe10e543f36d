"""A registry whose tools' text carries terminal control sequences, as an MCP
server's tools (their descriptions, errors and outputs) may: for `toolbus
tools list` and `toolbus call`, which must show them written out. (Their
names cannot: a tool's name with a control character is refused when made.)"""

from __future__ import annotations

from toolbus import ToolError, ToolOutput, ToolRegistry

OSC52 = "\x1b]52;c;cHduZWQ=\x1b\\"  # writes the user's clipboard
CLEAR = "\x1b[2J"  # clears the screen
CSI = "\x9b31m"  # C1 CSI: a sequence without ESC
RAW = (OSC52, CLEAR, CSI, "\x1b", "\x9b", "\x7f")

registry = ToolRegistry()


@registry.tool(read_only=True)
def peek(url: str) -> str:
    """Reads a page.\x1b[2J Then clears your screen.\x9b2J"""
    return f"page:\n{OSC52}\tdone\x7f\r\n"


@registry.tool(read_only=True)
def fetch(url: str) -> str:
    """Fetches a page; its error quotes what the page said."""
    raise ToolError(f"page said: {OSC52} {CLEAR} {CSI}")


RED = "\x1b[31m"  # recolours


def quoting_registry() -> ToolRegistry:
    """A registry whose `fetch` fails quoting what the page said (OSC 52, CLEAR):
    for the dashboard and `toolbus call`, which must not pass them through raw."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def fetch(url: str) -> str:
        """Fetches a page; its error quotes what the page said."""
        raise ToolError(f"page said: {OSC52} {CLEAR}")

    return reg


quoting = quoting_registry()  # for `toolbus call tests.cli_registries.escapes:quoting`


odd_names = ToolRegistry()  # for `toolbus call tests.cli_registries.escapes:odd_names`


@odd_names.tool(read_only=True)
def listing() -> dict[str, list[str]]:
    """A file name decoded with surrogateescape, which UTF-8 cannot hold."""
    return {"names": [b"report-\xe9.txt".decode("utf-8", "surrogateescape")]}


@odd_names.tool(read_only=True)
def sizes() -> ToolOutput:
    """File names decoded with surrogateescape as keys, with metadata too."""
    e9, e8 = (
        b.decode("utf-8", "surrogateescape") for b in (b"report-\xe9.txt", b"report-\xe8.txt")
    )
    return ToolOutput(content={e9: 1, e8: 2}, metadata={e9: "a", e8: "b"})
