"""A stand-in for the model APIs the provider samples call (docs/providers.md).

A local HTTP server answering OpenAI's Chat Completions and Responses and
Anthropic's Messages with the recorded replies of tests/fixtures/providers:
a tool call first, and the final answer once the request carries the tool's
result. `start()` points the SDKs at it through their environment
variables (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`, and test keys), so a
sample that makes `OpenAI()` or `Anthropic()` talks to it unchanged.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"


def _reply(path: str, request: dict[str, Any]) -> dict[str, Any] | None:
    text = json.dumps(request)
    if path.endswith("/chat/completions"):
        done = any(isinstance(m, dict) and m.get("role") == "tool" for m in request["messages"])
        name = "openai_chat_final" if done else "openai_chat_single"
    elif path.endswith("/responses"):
        name = (
            "openai_responses_final" if "function_call_output" in text else "openai_responses_calls"
        )
    elif path.endswith("/messages"):
        name = "anthropic_final" if '"tool_result"' in text else "anthropic_single"
    else:
        return None
    reply: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return reply


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        request = json.loads(body or b"{}")
        reply = None if request.get("stream") else _reply(self.path, request)
        data = json.dumps(reply if reply is not None else {"error": "not recorded"}).encode()
        self.send_response(200 if reply is not None else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def start() -> str:
    """Serve on a free loopback port (a daemon thread) and point the SDKs at it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    os.environ.update(
        OPENAI_BASE_URL=f"{url}/v1",
        OPENAI_API_KEY="sk-test-not-a-key",
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="sk-ant-test-not-a-key",
    )
    return url
