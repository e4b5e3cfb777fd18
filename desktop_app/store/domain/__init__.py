"""SQL of the built-in flows' domain tables (``schema/domain``).

Each function returns a ``DomainWrite`` or an op for ``CheckpointStore.query``
(read-only) or ``CheckpointStore.write`` (a standalone write). They receive a
``SqlTx`` and use portable SQL (SQLite and PostgreSQL): flows stage them
through their ``StepContext`` without ever seeing SQL, and the store runs
them inside its transaction.

Text that reaches a report or a listing is ordered with :func:`code_point_order`,
never by the database's collation (PostgreSQL's ICU ``en-US`` puts
``__future__.py`` before ``LICENSE.txt``; SQLite's BINARY after it).
"""

from desktop_app.store.protocol import SqlTx


def code_point_order(tx: SqlTx, column: str) -> str:
    """SQL ordering ``column`` (text) by Unicode code point on ``tx``'s
    dialect: SQLite's default BINARY collation compares UTF-8 bytes, which is
    code point order; PostgreSQL needs ``COLLATE "C"`` (its database
    collation may be ICU or a libc locale). Use it in ``ORDER BY`` and
    ``min``/``max`` over text a person sees."""
    return f'{column} COLLATE "C"' if tx.dialect == "postgres" else column
