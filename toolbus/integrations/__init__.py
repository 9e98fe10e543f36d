"""toolbus inside the agent frameworks people already use, and their tools in toolbus.

Each integration is a module of its own that imports its framework only when
it is imported itself (install the extra: `pip install 'toolbus[langgraph]'`):

- `toolbus.integrations.langgraph`: `ToolbusNode`, a drop-in for LangGraph's
  `ToolNode`; `toolbus.integrations.langchain`: LangChain tools as toolbus tools
  (`ToolRegistry.add_langchain`).
- `toolbus.integrations.pydantic_ai`: `ToolbusToolset`, toolbus's tools as a
  pydantic-ai toolset; pydantic-ai tools in a registry (`add_pydantic_ai`).
- `toolbus.integrations.openai_agents`: `function_tools`, toolbus's tools for the
  OpenAI Agents SDK; its function tools in a registry (`add_openai_agents`).

See docs/integrations.md.
"""

__all__: list[str] = []
