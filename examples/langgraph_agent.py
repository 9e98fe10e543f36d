"""A LangGraph agent whose tool calls toolbus runs: `ToolbusNode` in place of `ToolNode`.

A typical LangGraph agent: a model node, a tools node, `tools_condition`
between them. Three lines change (marked `# toolbus`): the import, the tools
node, and closing it. The tools are the LangChain tools the agent already had.

What it shows, offline (a fake chat model plays the model's turns):
- the model's first turn asks for four calls; the two read-only weather calls
  and the flight search run in parallel, the hotel search hangs and is cut off
  at its deadline (ToolNode would wait for it forever);
- the flight search's API key is an `InjectedToolArg`: the model never sees it,
  toolbus supplies it (`inject=`) and masks it in every event;
- the booking is mutating: it runs alone, in order;
- every outcome reaches the model as a `ToolMessage` with the call's id, and
  the graph never sees an exception.

Run: python examples/langgraph_agent.py
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from toolbus import bus
from toolbus.integrations.langgraph import ToolbusNode  # toolbus (was: ToolNode)

FLIGHTS_API_KEY = "fl_live_93b1c7d2e8"  # the application's; never the model's
hang = threading.Event()  # the hotel service never answers in this example


# -- the agent's tools, as LangChain tools ---------------------------------------------


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Today's weather in a city."""
    return {"Oslo": {"city": "Oslo", "celsius": 4}, "Lisbon": {"city": "Lisbon", "celsius": 19}}[
        city
    ]


@tool
def search_flights(origin: str, destination: str, api_key: Annotated[str, InjectedToolArg]) -> str:
    """Search flights between two cities."""
    if api_key != FLIGHTS_API_KEY:
        raise PermissionError("the flights API refused the key")
    return f"TP1234 {origin}->{destination} 09:40, 189 EUR"


@tool
def get_hotel_prices(city: str) -> str:
    """Hotel prices in a city (its service is down today)."""
    hang.wait(30)
    return "no answer"


@tool
def book_flight(flight: str) -> str:
    """Book a flight (it changes the world: mutating)."""
    return f"booked {flight}, seat 14C"


TOOLS = [get_weather, search_flights, get_hotel_prices, book_flight]


# -- a scripted chat model: the turns a real model would take ------------------------------


def tool_call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


class ScriptedModel(GenericFakeChatModel):
    """The fake chat model of langchain-core, with `bind_tools` (it offers nothing more)."""

    offered: list[str] = []  # noqa: RUF012

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        self.offered = [t.name for t in tools]
        return self


model = ScriptedModel(
    messages=iter(
        [
            AIMessage(
                "",
                tool_calls=[
                    tool_call("get_weather", "call_wx1", city="Oslo"),
                    tool_call("get_weather", "call_wx2", city="Lisbon"),
                    tool_call("search_flights", "call_fl1", origin="OSL", destination="LIS"),
                    tool_call("get_hotel_prices", "call_ht1", city="Lisbon"),
                ],
            ),
            AIMessage("", tool_calls=[tool_call("book_flight", "call_bk1", flight="TP1234")]),
            AIMessage("Lisbon is 19°C against Oslo's 4°C: I booked TP1234, seat 14C."),
        ]
    )
).bind_tools(TOOLS)


# -- the graph ----------------------------------------------------------------------------


def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
    return {"messages": [model.invoke(state["messages"])]}


tools_node = ToolbusNode(  # toolbus (was: ToolNode(TOOLS))
    TOOLS,
    read_only=["get_weather", "search_flights", "get_hotel_prices"],
    timeout=0.5,
    inject={"api_key": lambda call: FLIGHTS_API_KEY},
)

graph = StateGraph(MessagesState)
graph.add_node("agent", agent)
graph.add_node("tools", tools_node)
graph.add_edge(START, "agent")
graph.add_conditional_edges("agent", tools_condition)
graph.add_edge("tools", "agent")
app = graph.compile()


def main() -> None:
    print("tools offered:", ", ".join(model.offered))
    exported = tools_node.registry.get("search_flights").schema  # type: ignore[union-attr]
    print("the model sees search_flights with:", ", ".join(exported["properties"]))
    with bus.Recorder(sender=tools_node.executor) as recorder:
        final = app.invoke({"messages": [HumanMessage("Oslo or Lisbon? Book me a flight.")]})
        tools_node.executor.drain_events()
    hang.set()

    for message in final["messages"]:
        if isinstance(message, AIMessage) and message.tool_calls:
            names = ", ".join(c["name"] for c in message.tool_calls)
            print(f"model asks for: {names}")
        elif isinstance(message, ToolMessage):
            content = str(message.content).replace("\n", "\\n")
            print(f"  [{message.tool_call_id}] {message.name} {message.status}: {content}")
    print("answer:", final["messages"][-1].content)

    for event in recorder.of("tool:executing"):
        if event.tool == "search_flights":
            print(f"tool:executing {event.tool} arguments={event.arguments}")
    # Read-only calls start in parallel, in no set order: what barriers do
    # guarantee is that a mutating call starts once every call before it ended.
    started = {e.call_id: e.seq for e in recorder.of("tool:executing")}
    ended = {e.call_id: e.seq for e in recorder.of("tool:finished")}
    first_turn = sorted(c for c in started if c != "call_bk1")
    print("turn 1, read-only, run in parallel:", ", ".join(first_turn))
    after = all(ended[c] < started["call_bk1"] for c in first_turn)
    print("call_bk1 (mutating) started after every call before it had ended:", after)
    events = [e for name in recorder.names() for e in recorder.of(name)]
    leaks = sum(FLIGHTS_API_KEY in repr(e) for e in events)
    print(f"events: {len(events)}; events showing the API key: {leaks}")
    tools_node.close()  # toolbus: the node's own executor


if __name__ == "__main__":
    main()
