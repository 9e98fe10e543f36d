"""Watching an executor: a live terminal dashboard, a status server and page.

    from toolbus.observe import live, serve_status

    with live(executor):                  # the dashboard in this terminal
        ...
    with serve_status(executor) as server:  # /, /status, /events, /metrics
        print(server.url)

Each surface loads what it needs (rich's live display, Starlette, uvicorn)
only when it is used: importing this package loads none of it. See
docs/observe.md.
"""

from ._live import live as live
from ._server import StatusServer as StatusServer
from ._server import serve_status as serve_status
