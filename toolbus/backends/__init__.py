"""The execution seam: where a tool's attempts run.

`Backend` is the protocol; `ThreadBackend` runs sync tools on worker threads
and `LoopBackend` runs async tools as tasks on an event loop. Tools and
executors choose one with `backend=`: a `Backend`, or a name: `"auto"` (the
default: thread for sync tools, loop for async ones), `"thread"`, `"loop"`, or
`"process"` (`ProcessBackend`: worker processes, killed at a deadline), or
a name bound with `Executor(backends={"gpu": some_backend})`, such as a
`RayBackend` (actors on a Ray cluster; the extra `ray`). A tool's choice
overrides its executor's.
"""

from ._loop import LoopBackend
from ._loop_thread import AsyncTask, LoopThread
from ._process import ProcessBackend
from ._protocol import Backend, BackendUnavailable, Host, Job
from ._ray import RayBackend
from ._resolve import BUILTIN_NAMES, Backends, BackendSpec, check_spec, check_tool_backend
from ._thread import ThreadBackend, ToolWorker, WorkerHandle

__all__ = [
    "BUILTIN_NAMES",
    "AsyncTask",
    "Backend",
    "BackendSpec",
    "BackendUnavailable",
    "Backends",
    "Host",
    "Job",
    "LoopBackend",
    "LoopThread",
    "ProcessBackend",
    "RayBackend",
    "ThreadBackend",
    "ToolWorker",
    "WorkerHandle",
    "check_spec",
    "check_tool_backend",
]
