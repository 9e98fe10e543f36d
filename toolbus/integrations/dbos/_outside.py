"""Where a durable call's tool runs: outside the workflow, as DBOS sees it.

A tool is one step's work. Run in the workflow's context, a DBOS step it made
would take the workflow's next position from a worker thread (at a moment
that depends on timing: not replayable); run in its result step's, the same
once the call has ended and that step with it (a tool that outlives its
deadline). Outside, DBOS runs such a step as a plain call, as it does for any
code outside a workflow; the tool acts as the workflow's identity.
"""

from __future__ import annotations

import contextvars

from dbos._context import (
    _NO_START_OPTIONS,
    DBOSContext,
    _auth_scope_var,
    _set_local_dbos_context,
    _workflow_start_options_var,
    get_authentication,
    get_local_dbos_context,
)

__all__ = ["outside_dbos"]


def outside_dbos() -> contextvars.Context:
    """A copy of this context in which DBOS sees no workflow, only the
    identity the workflow acts as (its user, roles, assumed role): where a
    call is submitted from, so that its tool runs there. One per call.

    DBOS has no public way to step outside its context: its context
    variables are set here (`dbos._context`, DBOS 3.4;
    `tests/integrations/test_dbos_alone.py` fails if that changes)."""
    context = contextvars.copy_context()
    context.run(_leave_the_workflow)
    return context


def _leave_the_workflow() -> None:
    """As DBOS enters a step: a context of its own (one per call: a tool that
    changes its identity changes no one else's), no identity scope of the
    workflow's (`DBOSContextSetAuth`) to change, none of the workflow's
    start options (`SetWorkflowID`) to use up."""
    if get_local_dbos_context() is None:
        return
    identity = get_authentication()
    outside = DBOSContext()
    outside.authenticated_user = identity.user
    outside.authenticated_roles = list(identity.roles) if identity.roles is not None else None
    outside.assumed_role = identity.assumed_role
    _set_local_dbos_context(outside)
    _auth_scope_var.set(None)
    _workflow_start_options_var.set(_NO_START_OPTIONS)
