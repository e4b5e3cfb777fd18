"""What a flow's own domain SQL reads back (store/protocol.py's SqlResult):
``tx.execute(...)`` hands back its rows as tuples (first row, every row,
iteration) and the rows a write changed, on the SQLite store.

A real SQLite file (``db_path``)."""

from __future__ import annotations

from typing import Any

from desktop_app.store.sqlite.store import open_store


def test_execute_returns_the_rows_as_tuples_and_the_rows_a_write_changed(db_path):
    store = open_store(db_path)
    store.write(
        lambda tx: tx.execute("CREATE TABLE notes_demo(k TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    )
    added = store.write(
        lambda tx: (
            tx.execute(
                "INSERT INTO notes_demo(k, n) VALUES ('a', 1), ('b', 2), ('c', 3) RETURNING k"
            ).rowcount
        )
    )
    assert added == 3
    changed = store.write(lambda tx: tx.execute("UPDATE notes_demo SET n = n + 1 WHERE n > 1"))
    assert changed.rowcount == 2

    def read(tx: Any) -> tuple[Any, ...]:
        res = tx.execute("SELECT k, n FROM notes_demo ORDER BY k")
        first = res.fetchone()
        every = res.fetchall()
        every.append(("z", 0))  # the caller's own list: the result keeps its rows
        return first, every, res.fetchall(), list(res)

    first, every, again, iterated = store.query(read)
    assert first == ("a", 1)
    assert again == iterated == [("a", 1), ("b", 3), ("c", 4)]
    assert every == [*again, ("z", 0)]
    none = store.query(lambda tx: tx.execute("SELECT k FROM notes_demo WHERE n > 99"))
    assert none.fetchone() is None and none.fetchall() == [] and list(none) == []
    store.close()
