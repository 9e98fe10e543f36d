"""An entry point whose import fails: it needs a package nobody installed."""

import toolbus_example_plugin_missing_dependency  # noqa: F401

tool = None
