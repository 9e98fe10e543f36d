"""The executor's private parts: the jobs `toolbus.executor.Executor` hands off.

`toolbus/executor.py` is the facade: the public API, and the order things
happen in. Each job it delegates lives here, one to a module:

- `_options.py`: the constructor's keyword options checked, and the
  registry's tools checked against the backends and capacity groups.
- `_journal.py`: the journal opened with the executor, the calls a dead
  process left in doubt announced, the journal closed with the executor.
- `_machinery.py`: the executor's threads and actors, started.
- `_submission.py`: calls submitted (`Submitting`, a part of `Executor`):
  checked, planned, shown to the submission hooks (`on_submit`), handed on.
- `_plan.py`: a call planned into a `Run` (its tool, timeout, retries,
  backend, the policies' admission at submission), and a batch.
- `_waiting.py`: how a caller waits: the deadline backstop, and a wait
  given up cancelling its calls.
- `_nested.py`: calls an executor's own tools or hooks make of it (nested
  calls, a composite tool's steps), and the blocking call it must refuse there.
- `_approvals.py`: what a person's approval of a call covers (its steps).
- `_stats.py`: `ExecutorStats`, the executor's counters.
- `_batch_result.py`: a batch's `BatchResult`, read from its runs.
- `_names.py`: executor names (`executor-1`, ...), none repeating one in use.
- `_from_config.py`: `Executor.from_config`, reaching `toolbus.config` (a
  layer above) through the seam `_seams.config_reader`.

These modules sit in the executor's layer and import only lower layers (or
each other); `toolbus.executor` only under `TYPE_CHECKING`. This `__init__`
imports nothing: importing one module of the package loads only what it needs.
"""
