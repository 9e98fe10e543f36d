"""Command tools: a program run with arguments filled in from the call's parameters.

Never through a shell: each `argv` element is a `str.format` template filled in
on its own, so a value is one argument whatever it contains. The command runs in
a session of its own, with resource limits set before it starts (util-linux's
`prlimit`, else a tiny exec shim; never a `preexec_fn`), its output bounded, and
its whole session killed when toolbus gives up on it (its process group, and
what moved to a group of its own).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import math
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .._errors import ToolFailure, WorkerKilled
from .._options import positive_int
from .._process_group import kill_group, kill_session
from ..models import ErrorCode
from ._command_process import Watch, start
from ._command_secrets import Redactor, env_secrets, field_paths, secret_values
from ._command_spec import (
    check_argv,
    check_command_size,
    check_env,
    check_inherit,
    fill_argv,
    format_fields,
)
from ._rlimit_exec import limit_prefix
from ._running import CallHost, RunningCall, current_run
from ._tool import Tool

__all__ = ["CommandTool"]

log = logging.getLogger("toolbus")

# After the command exits and its session is killed, how long its pipes may stay
# open (held by a process that left the session with setsid) before the output
# read so far is taken as all there is.
_PIPE_GRACE = 1.0
_STDERR_TAIL = 400
# What a failed allocation looks like in a command's last words (the last: the
# dynamic loader, with too little address space to map a library).
_MEMORY_WORDS = (
    "memoryerror",
    "cannot allocate memory",
    "out of memory",
    "bad_alloc",
    "failed to map segment",
)
_MEMORY_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGKILL})
_SIGNALS = frozenset(int(s) for s in signal.Signals)


class CommandTool(Tool):
    """A tool that runs `argv` as a subprocess and returns its exit code and output.

    - `params`: a pydantic model class or a JSON schema (dict) of the
      parameters. Each `argv` element is a `str.format` template; its fields
      name parameters (`"--city={city}"`). `argv[0]` is the program: a literal,
      resolved on this process's PATH when the tool is made.
    - The command runs in its own session and process group, stdin from
      /dev/null. `memory_limit_mb` (`RLIMIT_AS`: virtual memory) and
      `cpu_limit_s` (`RLIMIT_CPU`, rounded up to whole seconds) bound it.
    - Its environment is `env` plus the variables named in `inherit_env` (all
      of them when `inherit_env=True`); nothing else, not even `PATH`.
    - At most `max_output_bytes` of stdout and of stderr are kept (the
      beginning); the rest is read and dropped, so the command never blocks.
      The call's secrets are scrubbed from them before they are cut, so that
      no part of one is left at a cut.
    - An argument longer than 131071 bytes, or a command line over the
      system's `ARG_MAX`, rejects the call (`INVALID_ARGUMENTS`).

    Exit 0 gives `ok` with `{"exit_code", "stdout", "stderr", "truncated"}`; a
    non-zero exit, `error`/`TOOL_ERROR` with that dict in `metadata`, never
    retried; death by a signal, `error`/`TOOL_CRASHED`. When toolbus stops the
    call (deadline, cancellation, close), its process group and every other
    process of its session (one that moved to a group of its own) are killed,
    the command is reaped, and `tool:killed` is published. Processes the
    command leaves running in its session when it exits are killed too. It
    runs on the `"loop"` backend: a running command holds no thread. POSIX
    only.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        params: type[BaseModel] | Mapping[str, Any] | None,
        *,
        description: str,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        cpu_limit_s: float | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool | Iterable[str] = False,
        cwd: str | os.PathLike[str] | None = None,
        max_output_bytes: int = 65536,
        read_only: bool = False,
    ) -> None:
        owner = f"tool {name!r}"
        self.name, self.description, self.read_only = name, description, read_only
        self.timeout, self.memory_limit_mb, self.cpu_limit_s = timeout, memory_limit_mb, cpu_limit_s
        # Its limits are set on its own command, not by a process backend: it
        # runs on the event loop, where a running command holds no thread.
        self.backend = "loop"
        self.applies_own_limits = True  # prlimit or the exec shim, on the command
        if isinstance(params, type) and issubclass(params, BaseModel):
            self.Params = params  # type: ignore[misc]  # a ClassVar on Tool; ours per instance
        elif isinstance(params, Mapping):
            self.parameters = dict(params)
        elif params is not None:
            raise TypeError(f"{owner}: params must be a pydantic model class or a JSON schema dict")
        self.max_output_bytes = positive_int(max_output_bytes, "max_output_bytes", owner)
        if cwd is not None and not isinstance(cwd, str | os.PathLike):
            raise TypeError(f"{owner}: cwd must be a path, got {type(cwd).__name__}")
        self.cwd = cwd
        self.env = check_env(env, owner)
        # True (everything) or the names to take from os.environ.
        self.inherit_env: bool | tuple[str, ...] = check_inherit(inherit_env, owner)
        self._setup()  # options and the schema are checked here
        self.argv, self._fields = check_argv(argv, self._parameter_names(), owner)
        # What each argument's template reads: those that read a secret give
        # a secret argument, scrubbed from the command's output like the secret.
        self._reads = tuple(field_paths(format_fields(t)) for t in self.argv[1:])
        self._secret_paths = self._field_secret_paths()
        for field in sorted(self._fields & self._optional):
            raise ValueError(
                f"{owner}: argv needs parameter {field!r}, which is optional with no default: "
                "make it required or give it a default"
            )
        found = shutil.which(self.argv[0])
        if found is None:
            raise ValueError(f"{owner}: program {self.argv[0]!r} (argv[0]) was not found on PATH")
        self.program = os.path.abspath(found)
        try:
            self._prefix = limit_prefix(self.memory_limit_mb, self.cpu_limit_s)
        except RuntimeError as e:
            raise ValueError(f"{owner}: {e}") from None

    # -- set-up ---------------------------------------------------------------------

    def _field_secret_paths(self) -> tuple[tuple[str | None, ...], ...]:
        """`secret_paths` with each parameter's name as its argv fields (and
        `_command`'s values) spell it: the field's name, not its alias."""
        if self.Params is None:
            return self.secret_paths
        names = {f.alias or n: n for n, f in self.Params.model_fields.items()}
        return tuple(
            (names.get(p[0], p[0]) if p[0] is not None else None, *p[1:]) if p else p
            for p in self.secret_paths
        )

    def _parameter_names(self) -> set[str]:
        self._defaults: dict[str, Any] = {}
        self._optional: set[str] = set()
        if self.Params is not None:
            return set(self.Params.model_fields)
        props = self._schema.get("properties") or {}
        required = set(self._schema.get("required") or ())
        self._defaults = {k: v["default"] for k, v in props.items() if "default" in v}
        # A field argv needs must always have a value: given, or a default.
        self._optional = {k for k in props if k not in required and k not in self._defaults}
        return set(props)

    # -- per call -------------------------------------------------------------------

    def validate(self, arguments: dict[str, Any]) -> Any:
        """The validated parameters; `ArgumentError` also when argv cannot take
        them (a NUL, an argument or a command line too long for the system)."""
        params = super().validate(arguments)
        self._command(params, self._environment())
        return params

    def _values(self, params: Any) -> dict[str, Any]:
        if isinstance(params, BaseModel):
            return {n: getattr(params, n) for n in type(params).model_fields}
        return {**self._defaults, **params}

    def _command(self, params: Any, env: Mapping[str, str]) -> list[str]:
        args = fill_argv(self.argv[1:], self._fields, self._values(params), self.name)
        command = [*self._prefix, self.program, *args]
        check_command_size(command, env, self.name)
        return command

    def _redactor(
        self,
        params: Any,
        command: list[str],
        env: Mapping[str, str],
        here: tuple[CallHost, RunningCall] | None,
    ) -> Redactor:
        """What to scrub from this call's output: its secret parameters, the
        arguments filled in from them, its environment's variables named as
        secrets are, and what the executor's masker hid."""
        args = command[len(command) - len(self._reads) :] if self._reads else []
        found = secret_values(self._values(params), self._secret_paths, self._reads, args)
        named = [*self.env, *(self.inherit_env if isinstance(self.inherit_env, tuple) else ())]
        found.extend(env_secrets(env, named))
        if here is not None:
            found.extend(here[1].scrubber.values)
        return Redactor(found)

    def _environment(self) -> dict[str, str]:
        inherit = self.inherit_env
        if isinstance(inherit, tuple):
            env = {n: os.environ[n] for n in inherit if n in os.environ}
        else:
            env = dict(os.environ)
        env.update(self.env)
        return env

    async def run(self, params: Any) -> dict[str, Any]:
        """Run the command to its end; return `{"exit_code": 0, "stdout", "stderr",
        "truncated"}`.

        Raises `ToolFailure`: `TOOL_ERROR` (no retry) for a non-zero exit,
        `TOOL_CRASHED` for a death by a signal. If this coroutine is closed,
        the command's process group and session are killed. If its task is
        cancelled, they are killed, the command reaped and the kill announced
        (`tool:killed`, `killed_workers`) before the cancellation propagates: as
        `WorkerKilled` when toolbus settled the call (a deadline, a
        cancel, a close), so that the attempt counts as killed and not as a
        late result; as the `CancelledError` itself otherwise.
        """
        here = current_run.get()
        if here is not None and here[1].tool is not self:
            here = None  # run directly (`aexecute`) by some other call's tool
        attempt = here[1].attempt if here is not None else 0
        env = self._environment()
        command = self._command(params, env)
        # Known before it starts: the output is kept far enough past each cut
        # to scrub a secret that straddles it.
        redactor = self._redactor(params, command, env, here)
        try:
            # Started here, not by asyncio: its pid is known from the first
            # instant, so no cancellation can leave a started group unknown.
            proc = start(
                lambda: subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=self.cwd,
                    start_new_session=True,  # its own session and group: killed as one
                )
            )
        except OSError as e:
            if e.errno == errno.E2BIG:  # too long for the system: it would be again
                raise ToolFailure(
                    f"could not start {self.argv[0]!r}: its arguments and environment are more "
                    "than the system allows (E2BIG, Argument list too long)"
                ) from None
            # Nothing ran: the retry policy may try again.
            where = "its working directory" if e.filename == self.cwd else repr(self.argv[0])
            raise ToolFailure(f"could not start {where}: {e.strerror or e}", retry=True) from None
        try:
            watch = Watch(proc, self.max_output_bytes, redactor.lookahead)
        except BaseException:  # a loop that cannot watch it (no add_reader): stop it
            kill_group(proc.pid)
            kill_session(proc.pid)
            proc.communicate()
            raise
        try:
            # Shielded: a cancellation must not cancel the watch's own future.
            await asyncio.shield(watch.exited)
            # What it left running in its session (a background job) was killed
            # as it exited: nothing a tool call starts outlives the call.
            if watch.leftovers:
                log.info("tool %r: killed processes its command left running", self.name)
            await asyncio.wait([watch.closed], timeout=_PIPE_GRACE)
        except asyncio.CancelledError:
            killed = not watch.exited.done() and kill_group(proc.pid)
            try:
                await asyncio.shield(watch.exited)  # reaped: no zombie of ours remains
            except asyncio.CancelledError:
                pass  # cancelled again (its loop closing): close() reaps it
            error = self._killed(proc.pid, here, attempt, announce=killed)
            if error is None:
                raise
            raise error from None
        finally:
            watch.close()
        # Pipes still open after the grace were held by a process outside the
        # group: what they would have said is lost.
        cut = watch.out.cut or watch.err.cut or not watch.closed.done()
        # Scrubbed, then cut: no part of a secret is left at a cut.
        out, err = watch.out.text(redactor), watch.err.text(redactor)
        result = {"exit_code": proc.returncode, "stdout": out, "stderr": err, "truncated": cut}
        if proc.returncode != 0:
            raise self._failure(proc.returncode, result, redactor, watch.cpu_time)
        return result

    def _killed(
        self,
        pid: int,
        here: tuple[CallHost, RunningCall] | None,
        attempt: int,
        *,
        announce: bool,
    ) -> BaseException | None:
        """Announce the kill (if anything was left to kill); what to raise in
        place of the cancellation (None: the cancellation itself)."""
        if here is None:  # run without an executor: nobody to tell
            return None
        svc, run = here
        # Settled by toolbus (deadline, cancel, close): the step drops the
        # attempt as killed, not as a late result. Otherwise it is not toolbus's
        # cancellation (a loop shutting down) and stays one.
        ours = not run.is_live(attempt)
        if announce:
            reason = (run.stop_reason or "cancelled") if ours else "cancelled"
            svc.announce_killed(run, pid, reason)
        if ours:
            return WorkerKilled(f"the command of '{self.name}' was killed")
        return None

    def _failure(
        self, code: int, result: dict[str, Any], redactor: Redactor, cpu_time: float | None
    ) -> ToolFailure:
        """The failure of a command that ended with `code` (< 0: killed by a
        signal) after `cpu_time` seconds of CPU (None: not known)."""
        program = os.path.basename(self.argv[0])
        stderr: str = result["stderr"]  # scrubbed already
        tail = redactor.tail(stderr, _STDERR_TAIL).strip()
        said = f"; stderr ends: {tail}" if tail else ""
        memory, cpu = self.memory_limit_mb, self.cpu_limit_s
        # An allocation that failed under a memory limit is likely, not surely, the limit.
        maybe_memory = memory is not None and any(w in stderr.lower() for w in _MEMORY_WORDS)
        hint = f"; it may have gone over memory_limit_mb={memory}"
        if code > 0:
            text = f"{program!r} exited with code {code}{hint if maybe_memory else ''}{said}"
            return ToolFailure(text, metadata=result)
        sig = -code
        name = signal.Signals(sig).name if sig in _SIGNALS else f"signal {sig}"
        text, over = f"{program!r} was killed by {name}", True
        # SIGKILL is the hard CPU limit (a second after SIGXCPU, for a command
        # that ignores it) when the command had used its soft limit's worth.
        over_cpu = cpu is not None and cpu_time is not None and cpu_time >= math.ceil(cpu)
        if sig == signal.SIGXCPU and cpu is not None:
            text = f"{program!r} went over cpu_limit_s={cpu} ({name})"
        elif sig == signal.SIGKILL and over_cpu:
            text = f"{program!r} went over cpu_limit_s={cpu} ({name}, at the hard limit)"
        elif memory is not None and (maybe_memory or sig in _MEMORY_SIGNALS):
            text += hint
            if sig == signal.SIGKILL and cpu is not None and cpu_time is None:
                text += f" or cpu_limit_s={cpu}"  # its CPU time is not known here
        elif sig == signal.SIGKILL and cpu is not None and cpu_time is None:
            text += f"; it may have gone over cpu_limit_s={cpu}"
        else:
            over = False
        # Over a limit, it would only go over it again; other crashes are
        # retried as crashes are (read-only or idempotent tools only).
        data = {**result, "signal": name}
        return ToolFailure(text + said, code=ErrorCode.TOOL_CRASHED, metadata=data, retry=not over)
