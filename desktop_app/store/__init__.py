"""Everything that speaks SQL.

``desktop_app.store.protocol`` (records and the :class:`CheckpointStore`
protocol), ``desktop_app.store.statements`` and the ``desktop_app.store.memory``
backend never import apsw, so the engine can depend on them. Only
``connection``, ``migrations`` and the ``sqlite`` package load apsw, and the
``postgres`` package psycopg; import them explicitly. Each backend package
exports one ``BACKEND`` (:mod:`desktop_app.store.backend`).
"""
