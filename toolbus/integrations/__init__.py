"""toolbus inside the agent frameworks people already use, and their tools in toolbus.

Each integration is a module of its own that imports its framework only when
it is imported itself (install the extra: `pip install 'toolbus[langgraph]'`):

- `toolbus.integrations.langgraph`: `ToolbusNode`, a drop-in for LangGraph's
  `ToolNode`; `toolbus.integrations.langchain`: LangChain tools as toolbus tools
  (`ToolRegistry.add_langchain`).

See docs/integrations.md.
"""

__all__: list[str] = []
