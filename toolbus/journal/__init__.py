"""The durable journal: every mutating call recorded before it runs.

`Executor(journal="agent-journal.sqlite")` writes an intent record (synced to
disk) before a mutating call's tool first runs, then each attempt and the
outcome. After a crash, `Journal(path).in_doubt()` (and the `tool:in-doubt`
events a new executor publishes) name the calls that started and never
finished; a call whose idempotency key already ended `ok` is not run again but
answered from the journal (`metadata["replayed"]`). See docs/journal.md.

Modules: `_journal.py` (the public `Journal`), `_session.py` (what the
pipeline calls, per executor), `_writer.py` (the writer thread and its loop),
`_ops.py` (what is queued to it), `_commit.py` (group commit), `_failures.py`
(failed commits, a failed journal), `_upkeep.py` (the writer's idle work),
`_store.py` (schema and queries), `_records.py` (`JournalRecord`), `_owner.py`
(sessions and when their owner is gone), `_retention.py`, `_prune.py`,
`_encode.py` (what is written, within bounds).
"""

from ._journal import Journal
from ._ops import JournalClosed, JournalFailed
from ._records import JournalAttempt, JournalOwner, JournalRecord, RecordState
from ._retention import Retention
from ._writer import JournalStats

__all__ = [
    "Journal",
    "JournalAttempt",
    "JournalClosed",
    "JournalFailed",
    "JournalOwner",
    "JournalRecord",
    "JournalStats",
    "RecordState",
    "Retention",
]
