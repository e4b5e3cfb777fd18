"""Optional store methods are declared in ``capabilities`` and read, never
probed: the conformance check fails a store whose methods and declared names
disagree, and the engine follows the declaration, not the method."""

from __future__ import annotations

import itertools

import pytest

from desktop_app.flow import Engine
from desktop_app.store import conformance
from desktop_app.store.memory.store import InMemoryCheckpointStore

_spaces = itertools.count()
CHECK = next(c for c in conformance.CHECKS if c.name == "declared_capabilities_are_implemented")


def _run_on(cls: type[InMemoryCheckpointStore]) -> None:
    space = f"caps-{next(_spaces)}"
    h = conformance.Harness(lambda clock=None: cls(space=space, clock=clock), cls.capabilities)
    conformance.run_check(CHECK, h)


def test_the_stores_as_shipped_pass():
    _run_on(InMemoryCheckpointStore)


def test_a_declared_capability_without_its_method_fails():
    class Claims(InMemoryCheckpointStore):
        capabilities = InMemoryCheckpointStore.capabilities | {"worker_claims"}

    with pytest.raises(conformance.ConformanceError) as caught:
        _run_on(Claims)
    assert str(caught.value) == "declares 'worker_claims' but has no claim_for_worker()"


def test_a_method_nobody_would_see_fails():
    class Vacuums(InMemoryCheckpointStore):
        def vacuum(self, min_free_pages: int = 0) -> int:
            return 0

    with pytest.raises(conformance.ConformanceError) as caught:
        _run_on(Vacuums)
    assert str(caught.value) == "has vacuum() but does not declare 'vacuum': callers never see it"


def test_an_unknown_name_and_group_commit_without_append_batch_fail():
    class Unknown(InMemoryCheckpointStore):
        capabilities = InMemoryCheckpointStore.capabilities | {"teleport"}

    with pytest.raises(conformance.ConformanceError, match=r"\['teleport'\] are not ones"):
        _run_on(Unknown)

    class NoBatch(InMemoryCheckpointStore):
        capabilities = frozenset({"group_commit"})

    with pytest.raises(conformance.ConformanceError, match="without 'append_batch'"):
        _run_on(NoBatch)


def test_the_engine_reads_the_declaration_not_the_method():
    class Undeclared(InMemoryCheckpointStore):  # has append_batch, does not declare it
        capabilities = frozenset()

    assert Engine(Undeclared(), group_commit=True).committer is None
    assert Engine(InMemoryCheckpointStore()).committer is not None  # declares group_commit

    class BatchOnly(InMemoryCheckpointStore):  # as PostgreSQL: batching possible, not default
        capabilities = frozenset({"append_batch"})

    assert Engine(BatchOnly()).committer is None
    assert Engine(BatchOnly(), group_commit=True).committer is not None
