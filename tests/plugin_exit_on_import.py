"""A plugin module that calls sys.exit() when imported (tests/tools/test_plugins.py)."""

import sys

sys.exit("this plugin refuses to load")
