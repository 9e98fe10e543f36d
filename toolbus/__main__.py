"""`python -m toolbus ...` runs the command line (same as the `toolbus` command)."""

from .cli import main

main()
