"""The store conformance suite, shipped with the package: any backend runs it
on itself (as LangGraph ships ``checkpoint-conformance`` for its savers).

A backend of any package runs it with :func:`run_conformance`::

    from desktop_app.store.conformance import run_conformance

    def new_database():            # a new empty database, its schema applied
        url = make_empty_database()
        return lambda clock=None: MyStore(url, clock=clock)

    assert run_conformance(new_database, agent_log=MyAgentLog) == []

Underneath, a backend provides a :class:`Harness`: ``open()`` returns a NEW store object
(a new connection) on the same database each time it is called, so checks can
race two connections; ``agent_log(store)`` returns the agent log over a store
(or the harness has none); ``capabilities`` is what the store declares.
:func:`validate` runs every check and returns the failures; a test suite can
instead parametrise over :data:`CHECKS` and call :func:`run_check` (the
project's ``tests/contract`` does, on memory, SQLite and PostgreSQL).

One module per role protocol of :mod:`desktop_app.store.protocol` holds its
checks (:mod:`.run_log`, :mod:`.leases`, :mod:`.mailbox`, :mod:`.outbox`,
:mod:`.change_feed`, :mod:`.domain_store`, :mod:`.checkpoint_store`,
:mod:`.agent_log`); importing this package registers them all. Every method
of every role is covered by at least one check (:func:`coverage` counts them;
an uncovered method is a failure of the suite itself). A check that needs a
capability (``sql`` for domain writes) is skipped on a store that does not
declare it; ``checks_for(capabilities)`` lists what applies.

The suite needs no table of Flowdesk's built-in flows: the domain checks
create their own (``flowdesk_conformance_items``) through ``store.write``, so
a third-party backend runs it with nothing but its own schema.

Checks raise :class:`ConformanceError` (an ``AssertionError``) saying what
the store did wrong. Times are UTC epoch seconds.
"""

from __future__ import annotations

# each role module registers its checks in CHECKS on import, in this order
# isort: off
from desktop_app.store.conformance import (  # noqa: F401
    run_log,
    leases,
    mailbox,
    outbox,
    change_feed,
    domain_store,
    checkpoint_store,
    agent_log,
)

# isort: on
from desktop_app.store.conformance.helpers import _cp, _run
from desktop_app.store.conformance.suite import (
    CHECKS,
    ROLES,
    Check,
    ConformanceError,
    Harness,
    ManualTime,
    check,
    checks_for,
    coverage,
    role_methods,
    run_check,
    run_conformance,
    validate,
)

__all__ = [
    "CHECKS",
    "ROLES",
    "Check",
    "ConformanceError",
    "Harness",
    "ManualTime",
    "_cp",
    "_run",
    "check",
    "checks_for",
    "coverage",
    "role_methods",
    "run_check",
    "run_conformance",
    "validate",
]
