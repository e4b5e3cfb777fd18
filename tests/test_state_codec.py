"""Property tests: state encode/decode and delta round trips."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from desktop_app.flow.state import StateTracker, apply_output, load_state
from desktop_app.store import codec


class Inner(BaseModel):
    label: str
    weight: Decimal


class State(BaseModel):
    count: int = 0
    names: list[str] = []
    tags: set[str] = set()
    pair: tuple[int, str] = (0, "")
    when: datetime | None = None
    money: Decimal = Decimal("0")
    inner: list[Inner] = []
    table: dict[str, int] = {}


texts = st.text(max_size=12)
decimals = st.decimals(
    allow_nan=False, allow_infinity=False, places=4, min_value=-(10**6), max_value=10**6
)
datetimes = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
states = st.builds(
    State,
    count=st.integers(-(2**53), 2**53),
    names=st.lists(texts, max_size=5),
    tags=st.sets(texts, max_size=4),
    pair=st.tuples(st.integers(-100, 100), texts),
    when=st.none() | datetimes,
    money=decimals,
    inner=st.lists(st.builds(Inner, label=texts, weight=decimals), max_size=3),
    table=st.dictionaries(texts, st.integers(-5, 5), max_size=3),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)
json_states = st.dictionaries(st.sampled_from(list("abcdef")), json_values, max_size=6)


@settings(max_examples=150, deadline=None)
@given(state=states)
def test_any_state_survives_encode_store_decode(state):
    tracker = StateTracker(state)
    stored = codec.loads(codec.dumps(tracker.encode(state)))
    assert load_state(State, stored, "r", 0) == state


@settings(max_examples=150, deadline=None)
@given(old=json_states, new=json_states)
def test_delta_applied_to_old_gives_new(old, new):
    delta = codec.loads(codec.dumps(codec.diff_state(old, new)))
    assert codec.apply_state_delta(old, delta) == new


@settings(max_examples=60, deadline=None)
@given(first=states, updates=st.lists(states, min_size=1, max_size=5))
def test_successive_partial_updates_fold_back_exactly(first, updates):
    """What the store does: first snapshot, then deltas of tracker encodings."""
    tracker = StateTracker(first)
    snapshot = dict(tracker.encode(first))
    folded = snapshot
    state = first
    for upd in updates:
        changes = {"names": upd.names, "money": upd.money, "when": upd.when}
        state = apply_output(State, state, changes)
        before = folded
        encoded = tracker.encode(state)
        delta = codec.loads(codec.dumps(codec.diff_state(before, encoded)))
        folded = codec.apply_state_delta(before, delta)
    assert load_state(State, folded, "r", len(updates)) == state
