"""`module:attribute` to a `ToolRegistry`, for the command line and `toolbus mcp serve`."""

from __future__ import annotations

import importlib
import os
import sys

from .._errors import error_text
from ._registry import ToolRegistry

__all__ = ["load_registry"]


def load_registry(spec: str) -> ToolRegistry:
    """The `ToolRegistry` named by `module:attribute` (or a function returning one).

    The current directory is importable, as for `python -m`; `attribute` may
    be dotted (`module:holder.registry`). Raises `ValueError` with a one-line,
    readable message when the spec does not name one: no colon, a module that
    cannot be imported (or raises while it is), a missing attribute, a function
    that raises, or something that is not a registry.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected module:attribute (e.g. myapp.tools:registry), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import {module_name!r}: {e}") from e
    except Exception as e:  # the module's own code failed: a SyntaxError, a bad import-time call
        raise ValueError(f"cannot import {module_name!r}: {error_text(e)}") from e
    except SystemExit as e:
        # A script's `sys.exit()` at import: it would end the command quietly
        # (exit 0, nothing listed); it is a module that cannot be imported.
        raise ValueError(f"cannot import {module_name!r}: it called sys.exit({e.code!r})") from e
    except KeyboardInterrupt:
        raise  # the user's Ctrl-C: not the module's failure
    except BaseException as e:  # a module raising its own BaseException (GeneratorExit, ...)
        raise ValueError(f"cannot import {module_name!r}: {type(e).__name__}") from e
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, ToolRegistry):
        try:
            value = value()
        except Exception as e:
            raise ValueError(f"{spec}() raised {error_text(e)}") from e
        except SystemExit as e:
            raise ValueError(f"{spec}() called sys.exit({e.code!r})") from e
    if not isinstance(value, ToolRegistry):
        raise ValueError(f"{spec} is a {type(value).__name__}, not a ToolRegistry")
    return value
