"""What the pipeline's tests drive steps with, without an executor."""

from __future__ import annotations

from toolbus.hooks import ExecutorHooks
from toolbus.masking import SecretKeys


class DefaultHooks(ExecutorHooks):
    """The executor's default hooks, without an executor: none of its options set."""

    _pre_call = ()
    _post_call = ()
    _authorize = None
    _masker = None
    _secret_keys = SecretKeys()
