"""FlowdeskSaver stores what a step changed: a conversation's messages list
is stored as the new messages on top of the version before (bytes counted in
the database, never timed), reads back exactly at every checkpoint, and
stays readable after pruning and in a new saver (a new process); a row
changed behind SQLite's back is refused by its checksum."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from desktop_app.errors import ThreadCorruptError
from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.store.sqlite.store import open_store


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def chat_graph(saver: FlowdeskSaver):  # type: ignore[no-untyped-def]
    def reply(state: Chat) -> dict[str, object]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(f"you said: {last} " + "x" * 200)], "turns": 1}

    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    return g.compile(checkpointer=saver)


def blob_bytes(store, channel: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    row = store.query(
        lambda tx: tx.fetchone(
            "SELECT count(*), coalesce(sum(length(blob)), 0) FROM langgraph_blobs WHERE channel=?",
            (channel,),
        )
    )
    return int(row[0]), int(row[1])


def test_messages_store_only_new_items_and_read_back_everywhere(db_path: Path) -> None:
    store = open_store(db_path)
    config = {"configurable": {"thread_id": "chat"}}
    try:
        saver = FlowdeskSaver(store)
        graph = chat_graph(saver)
        for turn in range(50):
            graph.invoke({"messages": [HumanMessage(f"message {turn}")]}, config)
        final = graph.get_state(config).values["messages"]
        assert len(final) == 100
        whole = len(saver.serde.dumps_typed(final)[1])

        rows, stored = blob_bytes(store, "messages")
        # one row per version; all of them together hold little more than the
        # final list once (whole lists every MAX_CHAIN versions and the first)
        assert rows == 100
        assert stored < 2.5 * whole, (stored, whole)

        # every checkpoint reads back exactly the messages it had
        for tup in saver.list(config):
            got = tup.checkpoint["channel_values"].get("messages", [])
            assert got == final[: len(got)]

        # a new saver (as in a new process) continues the thread
        again = chat_graph(FlowdeskSaver(store))
        again.invoke({"messages": [HumanMessage("after restart")]}, config)
        messages = again.get_state(config).values["messages"]
        assert messages[:100] == final and len(messages) == 102

        # pruning keeps the versions the latest list is built on
        saver.prune(["chat"])
        assert [t.checkpoint["id"] for t in saver.list(config)] == [
            graph.get_state(config).config["configurable"]["checkpoint_id"]
        ]
        assert graph.get_state(config).values["messages"] == messages
        assert blob_bytes(store, "messages")[0] < rows
    finally:
        store.close()


def test_a_list_whose_earlier_version_was_deleted_is_stored_whole(db_path: Path) -> None:
    """Another process (here another saver) deletes the thread while this
    saver still remembers its last list: the next version is stored whole,
    never on top of the deleted one."""
    store = open_store(db_path)
    config = {"configurable": {"thread_id": "chat"}}
    try:
        writer = FlowdeskSaver(store)
        graph = chat_graph(writer)
        graph.invoke({"messages": [HumanMessage("hello", id="h1")]}, config)
        first = graph.get_state(config).values["messages"]
        FlowdeskSaver(store).delete_thread("chat")
        assert graph.get_state(config).values == {}
        # the same first message again: a list the writer saw before, grown
        graph.invoke({"messages": [*first, HumanMessage("again", id="h2")]}, config)
        assert [m.content for m in graph.get_state(config).values["messages"]][:1] == ["hello"]
        assert (
            len(FlowdeskSaver(store).get_tuple(config).checkpoint["channel_values"]["messages"])
            == 4
        )
    finally:
        store.close()


@pytest.mark.parametrize(
    ("table", "column", "where"),
    [
        ("langgraph_blobs", "blob", "channel='messages'"),
        ("langgraph_checkpoints", "checkpoint", "1=1"),
        ("langgraph_writes", "blob", "1=1"),
    ],
)
def test_a_row_changed_outside_flowdesk_is_refused(
    db_path: Path, table: str, column: str, where: str
) -> None:
    """A checkpoint, channel value or pending write whose bytes changed behind
    SQLite's back (to another valid encoding) raises ThreadCorruptError instead
    of reaching LangGraph; other threads still read."""
    store = open_store(db_path)
    saver = FlowdeskSaver(store)
    graph = chat_graph(saver)
    for thread in ("bad", "good"):
        cfg = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": [HumanMessage("hello")]}, cfg)
        saver.put_writes(graph.get_state(cfg).config, [("messages", [])], "t1")
    other = saver.serde.dumps_typed([AIMessage("forged")])[1]
    store.close()

    conn = sqlite3.connect(db_path)  # the engine's connection is closed
    with conn:
        changed = conn.execute(
            f"UPDATE {table} SET {column}=? WHERE thread_id='bad' AND {where}", (other,)
        ).rowcount
    conn.close()
    assert changed >= 1

    store = open_store(db_path)
    try:
        saver = FlowdeskSaver(store)
        with pytest.raises(ThreadCorruptError) as err:
            list(saver.list({"configurable": {"thread_id": "bad"}}))
        assert "LangGraph thread bad" in str(err.value) and "outside Flowdesk" in str(err.value)
        good = saver.get_tuple({"configurable": {"thread_id": "good"}})
        assert good is not None and len(good.checkpoint["channel_values"]["messages"]) == 2
    finally:
        store.close()


@pytest.mark.parametrize(("migration", "status"), [("0010", "answered"), ("0012", "failed")])
def test_threads_stored_before_a_status_existed_keep_their_rows(
    tmp_path: Path, migration: str, status: str
) -> None:
    """Migrations 0010 (``answered``) and 0012 (``failed``) rebuild
    ``langgraph_threads`` (SQLite cannot change a CHECK in place): a
    database holding threads before them keeps every row, and a thread can
    then have the new status."""
    import apsw

    from desktop_app.store import migrations

    files = migrations.schema_files()
    before = [f for f in files if not (f.component == "core" and f.name >= migration)]
    conn = apsw.Connection(str(tmp_path / "old.db"))
    migrations.apply(conn, before)
    conn.execute(
        "INSERT INTO langgraph_threads VALUES ('default', 't-1', 'waiting', 1.5, 2.5, NULL, "
        "'{\"run_id\": \"t-1\"}', '[\"ok?\"]', 'cp-1')"
    )
    with pytest.raises(apsw.ConstraintError):
        conn.execute("UPDATE langgraph_threads SET status=?", (status,))
    migrations.apply(conn, files)
    conn.execute("UPDATE langgraph_threads SET status=? WHERE thread_id='t-1'", (status,))
    assert conn.execute("SELECT * FROM langgraph_threads").fetchall() == [
        ("default", "t-1", status, 1.5, 2.5, None, '{"run_id": "t-1"}', '["ok?"]', "cp-1")
    ]
    indexes = conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='langgraph_threads' "
        "AND sql IS NOT NULL"
    ).fetchall()
    assert indexes == [("langgraph_threads_created",)]
    conn.close()
