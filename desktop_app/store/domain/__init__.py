"""SQL of the built-in flows' domain tables (``schema/domain``).

Each function returns a ``DomainWrite`` or a query op for
``CheckpointStore.query``: flows stage them through their ``StepContext``
without ever seeing SQL, and the store runs them inside its transaction.
"""
