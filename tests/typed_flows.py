"""A flow whose state field changes type between processes (for the test
of a run whose stored state no longer fits its flow's model): ``typed``
waits for an answer; its ``name`` is a ``str``, or an ``int`` when
``FLOWDESK_TEST_NAME_INT`` is set. A flow's version fingerprints its
fields' names, not their types, so both are the same version."""

from __future__ import annotations

import os

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = '["tests.typed_flows:typed", "tests.typed_flows:versioned"]'


class _Order(BaseModel):
    name: int if os.environ.get("FLOWDESK_TEST_NAME_INT") else str = "x"  # type: ignore[valid-type]
    ok: str | None = None


# ``FLOWDESK_TEST_OWNER``: ``default`` adds a field ``owner`` with a default
# (a new version: the fingerprint has the fields' names), ``required`` one
# without; ``FLOWDESK_TEST_NO_OK`` removes ``ok`` (the ``versioned`` flow's)
if os.environ.get("FLOWDESK_TEST_OWNER") == "default":

    class Order(_Order):
        owner: str = "nobody"

elif os.environ.get("FLOWDESK_TEST_OWNER") == "required":

    class Order(_Order):  # type: ignore[no-redef]
        owner: str

else:
    Order = _Order  # type: ignore[misc]


typed = (
    FlowBuilder("typed", Order, inputs=("name",))
    .await_input("approve", "ok", prompt="OK?")
    .step("done", lambda s: {})
    .chain()
    .compile()
)

#: ``versioned``: the same steps under the version ``FLOWDESK_TEST_FLOW_VERSION``
#: names (``1`` by default)
versioned = (
    FlowBuilder("versioned", Order, version=os.environ.get("FLOWDESK_TEST_FLOW_VERSION", "1"))
    .await_input("approve", "ok", prompt="OK?")
    .compile()
)
