"""The Ray session of this process, shared by every RayBackend.

Ray allows one session per process. If the application initialised Ray
itself, toolbus uses that session and never shuts it down. Otherwise the first
backend that needs Ray starts it (`ray.init(address, **init_options)`, its
options win), and it is shut down when the last backend using it stops: when
no executor of this process still needs it.

`ray.init` runs on a thread of its own that lives as long as the session:
the processes a local `ray.init` starts die with the *thread* that started
them (Ray sets PR_SET_PDEATHSIG), so it cannot be a passing worker thread, and
it must not block the supervisor or the event loop for the seconds it takes.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from concurrent.futures import Future
from typing import Any

import ray

from .._version import __version__

__all__ = ["SESSION", "Session", "check_workers"]

log = logging.getLogger("toolbus.backends")

# How long stopping the last backend waits for `ray.shutdown` (about 1.5 s
# locally); past it the shutdown finishes on its own thread.
_SHUTDOWN_WAIT = 15.0


class Session:
    """Who uses Ray in this process, and whether toolbus started it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: set[int] = set()
        self._ready: Future[None] | None = None
        self._address: str | None = None
        self._owned = False
        self._stop: threading.Event | None = None
        self._keeper: threading.Thread | None = None

    @property
    def owned(self) -> bool:
        """Whether toolbus started the current session (and will shut it down)."""
        return self._owned

    def join(self, user: object, address: str | None, init_options: dict[str, Any]) -> Future[None]:
        """`user` needs Ray: a future done when the session is up (or failed)."""
        with self._lock:
            self._users.add(id(user))
            ready = self._ready
            if ready is not None and not (ready.done() and ready.exception() is not None):
                if (ready.done() and not ray.is_initialized()) or (
                    not self._owned and not ray.is_initialized()
                ):
                    ready = None  # shut down behind our back: start again
                else:
                    if address is not None and self._owned and address != self._address:
                        log.warning(
                            "RayBackend(address=%r): this process is already connected to "
                            "Ray at %r (one session per process); using that",
                            address,
                            self._address,
                        )
                    return ready
            ready = self._ready = Future()
            if ray.is_initialized():
                self._owned = False  # the application's: never ours to shut down
                ready.set_result(None)
                return ready
            self._owned = True
            self._address = address
            previous = self._keeper
            stop = self._stop = threading.Event()
            self._keeper = threading.Thread(
                target=self._keep,
                args=(ready, stop, previous, address, dict(init_options)),
                name="toolbus-ray-session",
                daemon=True,
            )
            self._keeper.start()
            return ready

    def leave(self, user: object) -> None:
        """`user` no longer needs Ray: the last one out shuts down a session
        toolbus started (waiting for it, within a bound)."""
        with self._lock:
            self._users.discard(id(user))
            if self._users or not self._owned or self._stop is None:
                return
            stop, keeper, ready = self._stop, self._keeper, self._ready
            self._stop = None
            self._ready = None
            self._owned = False
        stop.set()
        if ready is not None and not ready.done():
            return  # `ray.init` is still going (or stuck): its thread shuts it down after
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(_SHUTDOWN_WAIT)

    @staticmethod
    def _keep(
        ready: Future[None],
        stop: threading.Event,
        previous: threading.Thread | None,
        address: str | None,
        options: dict[str, Any],
    ) -> None:
        if previous is not None:
            previous.join()  # the last session's shutdown, if it is still going
        try:
            ray.init(address, **options)
        except BaseException as e:
            ready.set_exception(e)
            return
        ready.set_result(None)
        stop.wait()
        try:
            ray.shutdown()
        except Exception as e:
            log.error("ray.shutdown failed: %s", e)


SESSION = Session()


# What a Ray worker is asked before the first actor starts. Made from source
# in a module of no name (below), so it travels by value: it must run even
# where toolbus cannot be imported, to say so.
_PROBE = """
def toolbus_probe():
    import sys
    try:
        import toolbus
        import toolbus.backends._ray_actor
    except BaseException as e:
        return None, f"{type(e).__name__}: {e}", list(sys.version_info[:2])
    return getattr(toolbus, "__version__", "?"), None, list(sys.version_info[:2])
"""


async def check_workers(timeout: float) -> str | None:
    """Why Ray's workers cannot host toolbus's actors, or None if they can.

    Without this, an actor whose class cannot be loaded on the node (toolbus
    missing, or an older one) never starts, and Ray says nothing. Raises
    TimeoutError if no worker answered (worth asking again later)."""

    namespace: dict[str, Any] = {"__name__": "toolbus_ray_probe"}
    exec(_PROBE, namespace)
    probe = ray.remote(num_cpus=0, max_retries=0)(namespace["toolbus_probe"])
    version, error, python = await asyncio.wait_for(probe.remote(), timeout)
    if error is not None:
        return (
            f"toolbus cannot be imported on the Ray cluster's workers ({error}): install "
            f"toolbus {__version__} there"
        )
    here = list(sys.version_info[:2])
    if python != here:
        return (
            f"the Ray workers run Python {python[0]}.{python[1]} and this agent "
            f"{here[0]}.{here[1]}: tools travel by value (cloudpickle) and need the same one"
        )
    if version != __version__:
        log.warning("the Ray workers have toolbus %s, this agent %s", version, __version__)
    return None
