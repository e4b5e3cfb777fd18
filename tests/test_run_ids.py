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
