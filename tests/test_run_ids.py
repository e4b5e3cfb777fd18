"""``new_run_id``: time-ordered UUIDs (version 7) in the form run ids have
(32 lowercase hex digits), ascending within a process."""

from __future__ import annotations

import re
import uuid

from desktop_app.store.runids import new_run_id


def test_new_run_ids_are_uuid7_hex_ascending_and_unique():
    ids = [new_run_id() for _ in range(20_000)]  # several per millisecond
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for rid in (ids[0], ids[-1]):
        assert re.fullmatch(r"[0-9a-f]{32}", rid)
        parsed = uuid.UUID(rid)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and parsed.hex == rid


def test_uuid4_hex_is_a_random_version_4_uuid_as_uuid4_hex_writes_it(db_path):
    """``uuid4_hex`` (the engine's run and trace ids) gives what
    ``uuid.uuid4().hex`` gives: 32 lowercase hex digits that ``uuid.UUID``
    reads as version 4, variant RFC 4122, every one of the 122 random bits
    seen both ways over 2,000 ids, no two alike; a run the engine creates
    is named with one, and so is its trace."""
    from pydantic import BaseModel

    from desktop_app.flow import Engine, FlowBuilder
    from desktop_app.store.runids import uuid4_hex
    from desktop_app.store.sqlite.store import open_store

    ids = [uuid4_hex() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    ones = [0] * 128
    for text in ids:
        assert len(text) == 32 and text == text.lower()
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert parsed.hex == text
        for bit in range(128):
            ones[bit] += (parsed.int >> bit) & 1
    fixed = {76, 77, 78, 79, 62, 63}  # the version's 4 bits, the variant's 2
    assert sorted(b for b in range(128) if ones[b] in (0, len(ids))) == sorted(fixed)

    class S(BaseModel):
        n: int = 0

    b = FlowBuilder("ids", S)
    b.step("one", lambda s: {"n": 1})
    store = open_store(db_path)
    try:
        run_id = Engine(store, flows=[b.chain().compile()]).run("ids", S()).run_id
        trace = store.get_run(run_id).context["trace_id"]
    finally:
        store.close()
    for text in (run_id, trace):
        assert uuid.UUID(text).version == 4 and uuid.UUID(text).hex == text
