"""A module that fails while it is imported."""

raise RuntimeError("this module is broken")
