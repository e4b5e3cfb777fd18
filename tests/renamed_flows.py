""":data:`tests.sigterm_flows.effects` as a new version of its code: the same
flow ``effects``, its last step renamed (``s3`` is now ``last``), so its
fingerprinted version differs. Registered in subprocesses through
``FLOWDESK_FLOWS=FLOWS_ENV``, for the tests of a worker that has a flow's new
code while runs started under the old one wait."""

from __future__ import annotations

from desktop_app.flow import FlowBuilder
from tests.sigterm_flows import Effects, _step

_builder = FlowBuilder("effects", Effects)
for _sid in ("s0", "s1", "s2", "last"):
    _builder = _builder.step(_sid, _step)
effects = _builder.chain().compile()

#: ``FLOWDESK_FLOWS`` naming :data:`effects` (the new code)
FLOWS_ENV = '["tests.renamed_flows:effects"]'
