"""Everything that speaks SQL.

``desktop_app.store.protocol`` (records and the :class:`CheckpointStore`
protocol) and ``desktop_app.store.memory.store`` never import apsw, so the engine
can depend on them. Only ``connection``, ``migrations`` and ``sqlite`` load
apsw; import them explicitly.
"""
