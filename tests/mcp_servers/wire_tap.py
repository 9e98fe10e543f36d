"""Run an MCP server over stdio and write every message the client sends it to a file.

    python wire_tap.py LOG server.py [args...]

Lets a test see what went over the wire (`notifications/cancelled`, say):
the client's lines are copied to LOG, then to the server, unchanged.
"""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    log_path, *server = sys.argv[1:]
    process = subprocess.Popen([sys.executable, *server], stdin=subprocess.PIPE)
    assert process.stdin is not None
    with open(log_path, "w", encoding="utf-8") as log:
        for line in sys.stdin.buffer:
            log.write(line.decode("utf-8", "replace"))
            log.flush()
            process.stdin.write(line)
            process.stdin.flush()
    process.stdin.close()
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
