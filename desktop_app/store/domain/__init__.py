"""SQL of the built-in flows' domain tables (``schema/domain``).

Each function returns a ``DomainWrite`` or an op for ``CheckpointStore.query``
(read-only) or ``CheckpointStore.write`` (a standalone write). They receive a
``SqlTx`` and use portable SQL (SQLite and PostgreSQL): flows stage them
through their ``StepContext`` without ever seeing SQL, and the store runs
them inside its transaction.
"""
