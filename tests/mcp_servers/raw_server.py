"""A hand-written stdio MCP server (JSON-RPC lines, no SDK) that says what no
well-behaved server would: for client tests of replies the SDK cannot parse
or reads in its own way. `python raw_server.py [listing]`.

Its tool `bad` answers as its `how` argument says; `listing` "notobj" adds a
tool whose inputSchema is not an object's. Calls with `"pair": true` are
answered once two of them came, the one with `"first": true` first: both are
in flight together, whatever order they arrive in.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "bad", "inputSchema": {"type": "object"}},
]


def send(message: Any) -> None:
    sys.stdout.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
    sys.stdout.flush()


def text(mid: Any, value: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": value}]}}


def log(data: Any) -> None:
    params = {"level": "error", "logger": "raw", "data": data}
    send({"jsonrpc": "2.0", "method": "notifications/message", "params": params})


def answer(mid: Any, args: dict[str, Any]) -> None:
    how = args.get("how")
    if how == "error32000":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": "quota used up"}})
    elif how == "error32000sse":  # (the words the SDK's HTTP client ends a lost stream with)
        message = "SSE stream ended without a response"
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": message}})
    elif how == "result42":
        send({"jsonrpc": "2.0", "id": mid, "result": 42})
    elif how == "resultnull":
        send({"jsonrpc": "2.0", "id": mid, "result": None})
    elif how == "surrogate":
        # (a lone surrogate's escape, which no str holding it could be encoded from)
        content = '[{"type":"text","text":"a\\ud800"}]'
        send(f'{{"jsonrpc":"2.0","id":{json.dumps(mid)},"result":{{"content":{content}}}}}')
    elif how == "errornomsg":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602}})
    elif how == "log":  # a log line quoting the arguments, during the call
        log("working with api key " + str(args.get("api_key")) + " " + json.dumps(args))
        send(text(mid, "done"))
    elif how == "late_log":  # the same, just after the result
        send(text(mid, "done"))
        log("cleanup after api key " + str(args.get("api_key")) + " " + json.dumps(args))
        log("end of late_log")
    else:
        send(text(mid, f"echo {args.get('text')}"))


def main() -> None:
    listing = sys.argv[1] if len(sys.argv) > 1 else ""
    tools = list(TOOLS)
    if listing == "notobj":
        tools.append({"name": "notobj", "inputSchema": {"type": "string"}})
    held: list[tuple[Any, dict[str, Any]]] = []
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        mid, method = message.get("id"), message.get("method")
        if mid is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        elif method in {"ping", "logging/setLevel"}:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/call":
            args = message["params"].get("arguments") or {}
            if not args.get("pair"):
                answer(mid, args)
                continue
            held.append((mid, args))
            if len(held) == 2:
                for held_id, held_args in sorted(held, key=lambda h: not h[1].get("first")):
                    answer(held_id, held_args)
                held.clear()
        else:
            send(
                {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + method}}
            )


if __name__ == "__main__":
    main()
