"""Resource limits for command tools, set in the child before its command starts.

Never with a `preexec_fn`, which is unsafe in a threaded parent: the command is
run under util-linux's `prlimit` when it is on PATH, else under this module run
as a script, a tiny exec shim:

    python -I -S _rlimit_exec.py AS_BYTES CPU_SECONDS -- PROGRAM ARGS...

("-" for no limit), which sets the limits and then becomes the command
(`execv`). Run as a file in isolated mode, it needs no `PYTHONPATH`: this module
imports only the standard library.
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import sys

__all__ = ["MIN_MEMORY_MB", "limit_prefix"]

_SHIM = os.path.abspath(__file__)
# The largest finite limit: below RLIM_INFINITY (all ones on Linux, 2**63 - 1
# on macOS), and what `resource.setrlimit` (a C long long) takes.
_INFINITY = resource.RLIM_INFINITY
_MAX_RLIMIT = min(2**63 - 1, _INFINITY - 1) if _INFINITY > 0 else 2**63 - 1
# Below this, not even the dynamic loader can map a program's libraries.
MIN_MEMORY_MB = 16


def limit_prefix(memory_limit_mb: int | None, cpu_limit_s: float | None) -> tuple[str, ...]:
    """The argv that runs a command under these limits (empty without limits).

    `RLIMIT_AS` is set to `memory_limit_mb`; `RLIMIT_CPU` to `cpu_limit_s`
    rounded up to whole seconds (soft: SIGXCPU), with a hard limit a second
    later (SIGKILL, for a command that ignores SIGXCPU); `RLIMIT_CORE` to 0, as
    SIGXCPU would dump core. RuntimeError if neither `prlimit` nor a Python
    executable is at hand."""
    if memory_limit_mb is None and cpu_limit_s is None:
        return ()
    as_bytes = memory_limit_mb * 1024 * 1024 if memory_limit_mb is not None else None
    prlimit = shutil.which("prlimit")
    if prlimit is not None:
        opts = ["--core=0"]
        if as_bytes is not None:
            n = _hard_cap(resource.RLIMIT_AS, as_bytes)
            opts.append(f"--as={n}:{n}")
        if cpu_limit_s is not None:
            soft = math.ceil(cpu_limit_s)
            hard = _hard_cap(resource.RLIMIT_CPU, soft + 1)
            opts.append(f"--cpu={min(soft, hard)}:{hard}")
        return (os.path.abspath(prlimit), *opts, "--")
    if not sys.executable:
        raise RuntimeError("resource limits need `prlimit` on PATH or a Python executable")
    memory = str(as_bytes) if as_bytes is not None else "-"
    cpu = repr(float(cpu_limit_s)) if cpu_limit_s is not None else "-"
    return (sys.executable, "-I", "-S", _SHIM, memory, cpu, "--")


def _hard_cap(which: int, value: int) -> int:
    # An unprivileged process may not raise a hard limit: never ask above it.
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def main(args: list[str]) -> None:
    """The shim: set the limits, then become the command (exit 127 if it cannot)."""
    if len(args) < 4 or args[2] != "--":
        sys.stderr.write("usage: _rlimit_exec.py AS_BYTES CPU_SECONDS -- PROGRAM [ARGS...]\n")
        os._exit(2)
    memory, cpu, command = args[0], args[1], args[3:]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory != "-":
        limit = _hard_cap(resource.RLIMIT_AS, int(memory))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu != "-":
        # CPU time survives exec: count the whole seconds this shim has used
        # already (a fraction of one, as a rule: not worth a second more).
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(float(cpu)) + int(usage.ru_utime + usage.ru_stime)
        hard = _hard_cap(resource.RLIMIT_CPU, soft + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (min(soft, hard), hard))
    try:
        os.execv(command[0], command)
    except OSError as e:
        sys.stderr.write(f"toolbus: failed to execute {command[0]}: {e.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
