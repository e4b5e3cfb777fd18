"""Conformance checks of CheckpointStore as a whole: close, and the capabilities it declares."""

from __future__ import annotations

from typing import cast

from desktop_app.errors import (
    RevisionConflictError,
)
from desktop_app.store.conformance.helpers import (
    _cp,
    _eq,
    _id,
    _ok,
    _run,
)
from desktop_app.store.conformance.suite import Harness, check
from desktop_app.store.protocol import (
    CAPABILITIES,
    CAPABILITY_METHODS,
)


@check("CheckpointStore.close")
def close_keeps_what_was_committed(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"kept": True}))
    s.close()
    _eq(dict(h.store().latest(rid).state), {"kept": True}, "committed before close")
    _ok(isinstance(s.capabilities, frozenset), "capabilities are declared")


@check()
def declared_capabilities_are_implemented(h: Harness) -> None:
    """What a store declares is what it has: each optional method behind a
    capability (:data:`~desktop_app.store.protocol.CAPABILITY_METHODS`) is
    callable exactly when its capability is declared, and every name
    declared is one :data:`~desktop_app.store.protocol.CAPABILITIES` knows."""
    s = h.store()
    declared = s.capabilities
    _ok(isinstance(declared, frozenset), "capabilities are declared as a frozenset")
    unknown = sorted(declared - CAPABILITIES)
    _ok(not unknown, f"capabilities {unknown} are not ones the protocol defines")
    _ok(
        "group_commit" not in declared or "append_batch" in declared,
        "declares 'group_commit' without 'append_batch'",
    )
    for name, methods in CAPABILITY_METHODS.items():
        for method in methods:
            has = callable(getattr(s, method, None))
            if name in declared:
                _ok(has, f"declares {name!r} but has no {method}()")
            else:
                _ok(not has, f"has {method}() but does not declare {name!r}: callers never see it")


@check(needs=("append_batch",))
def append_batch_isolates_each_run(h: Harness) -> None:
    """``append_batch``: every request appended in one call, a stale revision
    fails its own slot with RevisionConflictError and the others commit."""
    from desktop_app.store.group_commit import AppendRequest, BatchAppender

    s = h.store()
    a, b, c = _id(), _id(), _id()
    for rid in (a, b, c):
        s.create_run(_run(rid), _cp(rid, 0))
    out = cast(BatchAppender, s).append_batch(
        [
            AppendRequest(_cp(a, 1, {"n": 1})),
            AppendRequest(_cp(b, 2, {"n": 2})),  # not latest + 1: a stale writer
            AppendRequest(_cp(c, 1, {"n": 3})),
        ]
    )
    _eq(len(out), 3, "one result per request")
    _ok(out[0] is None and out[2] is None, f"the good requests commit: {out!r}")
    _ok(isinstance(out[1], RevisionConflictError), f"the stale one conflicts: {out[1]!r}")
    other = h.store()
    _eq([other.get_run(r).revision for r in (a, b, c)], [1, 0, 1], "revisions after the batch")
    _eq(dict(other.latest(c).state), {"n": 3}, "state of a batched append read back")
