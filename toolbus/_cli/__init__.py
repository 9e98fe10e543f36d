"""The command line's commands, one small module each; `toolbus/cli.py` wires them.

- `_common`: exit codes, one-line errors, loading `module:registry`;
- `tools`: `toolbus tools list`;
- `call`: `toolbus call`;
- `bench`: `toolbus bench`;
- `top`: `toolbus top` (the work is in `toolbus/observe/_top.py`);
- `mcp`: `toolbus mcp serve` (the work is in `toolbus/mcp/`).
"""
