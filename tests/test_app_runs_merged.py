"""One list of flow runs and agent runs: the status vocabulary and merged paging."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from desktop_app.runs_view import AGENT_AS_FLOW_STATUS, agent_status_as_flow, merged_page


@dataclass(frozen=True)
class Row:
    run_id: str
    created_at: float


def test_agent_statuses_in_the_flow_vocabulary() -> None:
    assert agent_status_as_flow("done") == "completed"
    assert agent_status_as_flow("timeout") == "timed_out"
    assert agent_status_as_flow("input_required") == "waiting"
    assert agent_status_as_flow("rate_limited") == "rate_limited"
    assert set(AGENT_AS_FLOW_STATUS) == {"done", "timeout", "input_required"}


@pytest.mark.parametrize("seed", range(30))
def test_merged_pages_equal_slices_of_the_sorted_union(seed: int) -> None:
    rng = random.Random(seed)
    flows = [Row(f"f{i:04d}", float(rng.randint(0, 60))) for i in range(rng.randint(0, 90))]
    agents = [Row(f"a{i:04d}", float(rng.randint(0, 60))) for i in range(rng.randint(0, 25))]
    newest_flows = sorted(flows, key=lambda r: (r.created_at, r.run_id), reverse=True)
    union = sorted([*flows, *agents], key=lambda r: (r.created_at, r.run_id), reverse=True)
    reads: list[int] = []

    def read(offset: int, limit: int) -> list[Row]:
        reads.append(limit)
        return newest_flows[offset : offset + limit]

    size = rng.randint(1, 12)
    for offset in range(0, len(union) + size, size):
        page, more = merged_page(read, agents, offset=offset, size=size)
        assert page == union[offset : offset + size]
        assert more == (len(union) > offset + size)
    # bounded reads: never more than the agents, a page and two rows
    assert max(reads) <= len(agents) + size + 2
