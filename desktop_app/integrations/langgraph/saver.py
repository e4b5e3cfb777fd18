"""``FlowdeskSaver``: LangGraph's checkpointer over Flowdesk's store.

A :class:`langgraph.checkpoint.base.BaseCheckpointSaver` that keeps a
graph's checkpoints, pending writes and channel values in the tables of
``schema/core/0009_langgraph.sql``, reached only through the store's
:class:`~desktop_app.store.protocol.DomainStore` seam (``query`` /
``write`` with a :class:`~desktop_app.store.protocol.SqlTx`), so the same
code runs on a SQLite file (apsw, Flowdesk's checksummed, group-committed
file) and on PostgreSQL. Each method is one transaction.

The layout follows LangGraph's own ``PostgresSaver``
(``langgraph.checkpoint.postgres``): a checkpoint row holds the checkpoint
without its channel values except the primitive ones (``None``, ``str``,
``int``, ``float``, ``bool``); every other channel value is a blob keyed by
``(channel, version)`` and written only when ``put`` receives that version
in ``new_versions``, so a step stores the channels it changed, never the
others again. Versions are ``PostgresSaver``'s (``"<32-digit n>.<random>"``),
so two forks of one checkpoint never share a version of a channel.
Everything is encoded by the saver's ``serde`` (LangGraph's
``JsonPlusSerializer`` unless given).

Where Flowdesk departs from ``PostgresSaver``: a list channel whose new
version only appended to the version this saver stored last (a
conversation's ``messages``) is stored as the new items plus a reference to
that version (``base``), at most :data:`MAX_CHAIN` times in a row, so bytes
per step follow what the step added, not the conversation's length. Items
are compared by their encoded bytes, so an item changed in place makes the
whole list stored again. The saver remembers the last list of the last
:data:`REMEMBERED_THREADS` threads it wrote; a new process stores each list
whole once first.

Besides LangGraph's contract the saver keeps one row per thread
(``langgraph_threads``: status, last writer, ExecutionContext ids, the
unanswered interrupts) that ``flowdesk runs``/``show``/``answer`` and the
app read (:mod:`.threads`).

The async methods run the sync ones in a worker thread
(``asyncio.to_thread``): the store's connection is shared and locked, as
LangGraph's ``SqliteSaver`` shares one.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, cast

from desktop_app.integrations import missing_extra

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ModuleNotFoundError as exc:  # the extra is not installed: say which
    raise missing_extra(exc, "langgraph", "Flowdesk's LangGraph integration", "langgraph") from exc

from desktop_app.errors import InputError, StoreError, ThreadCorruptError
from desktop_app.flow.context import ExecutionContext, trace_id_problem
from desktop_app.flow.owners import new_owner
from desktop_app.integrations.langgraph.threads import (
    ANSWERED,
    CHECKPOINT_COLUMNS,
    ERROR,
    ERROR_SOURCE_NODE,
    FAILED,
    INTERRUPT,
    RESUME,
    checksum,
    interrupts_json,
    refuse_moved,
    ts,
    verify_checkpoint,
)
from desktop_app.store.protocol import CheckpointStore, SqlTx

#: channels whose update means a node is scheduled (LangGraph 1.x: START's
#: input, an edge's ``branch:to:<node>``, a ``Send``'s task list)
_TRIGGERS = ("__start__", "__pregel_tasks")
#: the key LangGraph's Pregel loop puts in the config it loads a thread with
#: (``langgraph._internal._constants.CONFIG_KEY_RUNTIME``); ``get_state`` and
#: ``get_state_history`` read without it
_LOOP_KEY = "__pregel_runtime"
#: a thread in these statuses has work its next invoke runs before it stores
#: a checkpoint: a step a killed process left, an answer given in Flowdesk,
#: or a node that raised
_RESUMABLE = ("running", ANSWERED, FAILED)
_ENTRY_FIELDS = ("tenant_id", "user_id", "session_id", "trace_id", "correlation_id")

#: a grown list is stored as its new items on top of the version it extends,
#: at most this many times in a row (then whole again: reads stay bounded)
MAX_CHAIN = 64
#: threads whose last list values the saver remembers (to store only new items)
REMEMBERED_THREADS = 256
#: the type prefix of a blob holding only a list's new items
APPEND = "append:"


class _Seen(NamedTuple):
    """The last version of a list channel this saver stored, item by item."""

    version: str
    items: list[tuple[str, bytes]]
    depth: int


def _inline(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _bytes(value: Any) -> bytes:
    return bytes(value) if value is not None else b""


class StoppedAt(NamedTuple):
    """What a thread's latest root checkpoint says about the tasks of its
    step (:meth:`FlowdeskSaver.stopped_at`); a task is named by its node,
    ``"NODE (Send I)"`` for the I-th task a ``Send`` started.

    Attributes:
        running: tasks scheduled at it that stored no result: when its
            process stopped they were running (or not started yet, or
            resumed after an answer); its program runs them again from
            their start, as LangGraph does.
        failed: ``(task, error)`` of tasks whose last run raised (LangGraph's
            ``__error__`` write, the exception's ``repr``); its program runs
            them again from their start too.
    """

    running: list[str]
    failed: list[tuple[str, str]]


#: what a task stores that is not its result: it did not finish by them
_NOT_RESULTS = (INTERRUPT, RESUME, ERROR)


def _raised(writes: Sequence[tuple[str, Any]]) -> bool:
    """Whether a task's writes say it raised and its invoke raises too: an
    error no node's error handler takes (LangGraph writes
    ``__error_source_node__`` beside one it routes to its handler). An
    invoke cancelled from outside (``asyncio.wait_for``) writes no error:
    its thread stays ``running``, then ``interrupted``."""
    channels = {ch for ch, _ in writes}
    return ERROR in channels and ERROR_SOURCE_NODE not in channels


def _task_name(task_path: str, sends: Sequence[Any]) -> str | None:
    """The task a write's path names: ``"~__pregel_pull, NODE"`` is NODE's,
    ``"~__pregel_push, I, …"`` the I-th ``Send``'s (``sends``: the
    checkpoint's ``__pregel_tasks``); ``None`` for any other."""
    parts = task_path.split(", ")
    if len(parts) < 2:
        return None
    if parts[0] == "~__pregel_pull":
        return parts[1]
    if parts[0] == "~__pregel_push" and parts[1].isdigit():
        i = int(parts[1])
        node = getattr(sends[i], "node", "?") if i < len(sends) else "?"
        return f"{node} (Send {i})"
    return None


class FlowdeskSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer storing threads in Flowdesk's database.

    Args:
        store: an open Flowdesk store with the ``sql`` capability
            (``bootstrap.open_checkpoint_store``; SQLite or PostgreSQL) whose
            schema is applied (``flowdesk db apply``). Its ``scope`` scopes
            the threads.
        serde: LangGraph serializer (default ``JsonPlusSerializer``).
        context: ExecutionContext ids stored with each new thread; a
            ``tenant_id``/``user_id``/``session_id``/``trace_id``/
            ``correlation_id`` in a call's ``configurable`` overrides its
            field. ``run_id`` is the thread id.

    Use :meth:`open` to open the store from a database string.

    Raises (every method): ``StoreError`` when the storage fails (nothing
    half-written); ``SchemaMissingError`` at :meth:`open` before
    ``flowdesk db apply``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        serde: SerializerProtocol | None = None,
        context: ExecutionContext | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.scope = store.scope
        self.context = context or ExecutionContext()
        self.owner = new_owner()
        self._owns_store = False
        self._seen: OrderedDict[tuple[str, str], dict[str, _Seen]] = OrderedDict()
        self._seen_lock = threading.Lock()

    # -- opening -------------------------------------------------------------

    @classmethod
    @contextmanager
    def open(
        cls,
        database: str | Path | None = None,
        *,
        scope: str | None = None,
        context: ExecutionContext | None = None,
    ) -> Iterator[FlowdeskSaver]:
        """Open Flowdesk's database and yield a saver over it, closing it after.

        Args:
            database: a SQLite file path or a ``postgresql://`` URL; default
                the settings' ``db_path`` (``flowdesk --db`` / ``FLOWDESK_DB_PATH``).
            scope: the store scope (default the settings').
            context: see the class.

        Raises:
            SchemaMissingError: the schema is not applied (run ``flowdesk db apply``).
            BackendUnavailableError, DatabaseOpenError, ConfigError.
        """
        from desktop_app.bootstrap import open_checkpoint_store
        from desktop_app.config import load_settings

        overrides: dict[str, object] = {}
        if database is not None:
            overrides["db_path"] = str(database)
        if scope is not None:
            overrides["scope"] = scope
        store = open_checkpoint_store(load_settings(**overrides))
        saver = cls(store, context=context)
        saver._owns_store = True
        try:
            yield saver
        finally:
            store.close()

    # -- LangGraph's contract (sync) ----------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``PostgresSaver``'s versions: a 32-digit counter and a random
        fraction, so versions of two forks of one checkpoint differ."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    def stopped_at(self, thread_id: str) -> StoppedAt:
        """The tasks of the thread's latest root checkpoint that did not
        finish: scheduled there (an edge's ``branch:to:NODE``, a ``Send``'s
        task) with no result stored (an interrupt or an answer is not one),
        or whose last run raised."""
        tup = self.get_tuple({"configurable": {"thread_id": thread_id}})
        if tup is None:
            return StoppedAt([], [])
        checkpoint_id = tup.config["configurable"]["checkpoint_id"]
        writes = self.store.query(
            lambda tx: tx.fetchall(
                "SELECT task_path, channel, type, blob FROM langgraph_writes WHERE scope=? "
                "AND thread_id=? AND checkpoint_ns='' AND checkpoint_id=? ORDER BY task_id, idx",
                (self.scope, thread_id, checkpoint_id),
            )
        )
        updated = tup.checkpoint.get("updated_channels") or ()
        sends = tup.checkpoint["channel_values"].get("__pregel_tasks") or []
        scheduled = [ch.removeprefix("branch:to:") for ch in updated if ch.startswith("branch:to:")]
        if "__pregel_tasks" in updated:
            scheduled += [f"{getattr(s, 'node', '?')} (Send {i})" for i, s in enumerate(sends)]
        finished: set[str] = set()
        failed: list[tuple[str, str]] = []
        for path, channel, typ, blob in writes:
            task = _task_name(str(path or ""), sends)
            if task is None:
                continue
            if channel == ERROR:
                failed.append((task, str(self.serde.loads_typed((str(typ), _bytes(blob))))))
            elif channel not in _NOT_RESULTS:
                finished.add(task)
        failed = [(task, error) for task, error in failed if task not in finished]  # rerun, done
        raised = {task for task, _ in failed}
        return StoppedAt([t for t in scheduled if t not in finished | raised], failed)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), or the thread's
        latest in ``checkpoint_ns``; ``None`` when there is none."""
        c = config["configurable"]
        thread_id = str(c["thread_id"])
        ns = c.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)

        def op(tx: SqlTx) -> CheckpointTuple | None:
            sql = (
                f"SELECT {CHECKPOINT_COLUMNS} FROM langgraph_checkpoints "
                "WHERE scope=? AND thread_id=? AND checkpoint_ns=?"
            )
            params: list[Any] = [self.scope, thread_id, ns]
            if checkpoint_id:
                sql += " AND checkpoint_id=?"
                params.append(checkpoint_id)
            else:
                sql += " ORDER BY checkpoint_id DESC LIMIT 1"
            if _LOOP_KEY in c:  # a run loads the thread: not one db copy moved away
                self._refuse_moved(tx, thread_id)
            row = tx.fetchone(sql, params)
            return None if row is None else self._tuple(tx, thread_id, row)

        found = self.store.query(op)
        if found is not None and ns == "" and not checkpoint_id and _LOOP_KEY in c:
            self._claim(thread_id, found.checkpoint["id"])
        return found

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of ``config``'s thread
        (and namespace, and checkpoint id, when given) or of every thread;
        ``filter``: metadata keys that must be equal; ``before``: only ids
        below its ``checkpoint_id``; at most ``limit``."""
        wheres = ["scope=?"]
        params: list[Any] = [self.scope]
        if config is not None:
            c = config["configurable"]
            wheres.append("thread_id=?")
            params.append(str(c["thread_id"]))
            if c.get("checkpoint_ns") is not None:
                wheres.append("checkpoint_ns=?")
                params.append(c["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                wheres.append("checkpoint_id=?")
                params.append(checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            wheres.append("checkpoint_id<?")
            params.append(before_id)
        sql = (
            f"SELECT thread_id, {CHECKPOINT_COLUMNS} FROM langgraph_checkpoints "
            f"WHERE {' AND '.join(wheres)} ORDER BY checkpoint_id DESC"
        )
        if limit is not None and not filter:
            sql += f" LIMIT {int(limit)}"

        def op(tx: SqlTx) -> list[CheckpointTuple]:
            out: list[CheckpointTuple] = []
            for row in tx.fetchall(sql, params):
                if filter:
                    verify_checkpoint(str(row[0]), row[1:])
                    metadata = self.serde.loads_typed((row[6], _bytes(row[7])))
                    if any(metadata.get(k) != v for k, v in filter.items()):
                        continue
                out.append(self._tuple(tx, str(row[0]), row[1:]))
                if limit is not None and len(out) >= limit:
                    break
            return out

        yield from self.store.query(op)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (a child of ``config``'s ``checkpoint_id``),
        its primitive channel values inline and, of the others, only the
        versions in ``new_versions``. Returns the config naming it."""
        c = config["configurable"]
        thread_id = str(c["thread_id"])
        ns = c.get("checkpoint_ns", "") or ""
        parent_id = c.get("checkpoint_id")
        body = dict(checkpoint)
        values = dict(checkpoint["channel_values"])
        body["channel_values"] = {k: v for k, v in values.items() if _inline(v)}
        blobs: list[tuple[Any, ...]] = []
        seen = self._remembered(thread_id, ns)
        now_seen: dict[str, _Seen] = {}
        for k, ver in new_versions.items():
            if k in values and not _inline(values[k]):
                typ, blob, base = self._encode(values[k], str(ver), seen.get(k), k, now_seen)
                blobs.append(_blob_row(self.scope, thread_id, ns, k, str(ver), typ, blob, base))
        cp_type, cp_bytes = self.serde.dumps_typed(body)
        meta = get_serializable_checkpoint_metadata(config, metadata)
        md_type, md_bytes = self.serde.dumps_typed(meta)
        now = time.time()
        scheduled = any(
            ch in _TRIGGERS or ch.startswith("branch:to:")
            for ch in (checkpoint.get("updated_channels") or ())
        )
        context = self._context(c, thread_id)

        def op(tx: SqlTx) -> None:
            if ns == "":
                self._lock_thread(tx, thread_id)
            self._refuse_moved(tx, thread_id)
            for i, row in enumerate(blobs):
                if row[7] is not None and not self._has_blob(tx, thread_id, ns, row[3], row[7]):
                    # the version it extends is gone (the thread was deleted or
                    # pruned meanwhile, maybe by another process): store it whole
                    value = values[row[3]]
                    typ, blob = self.serde.dumps_typed(value)
                    blobs[i] = _blob_row(self.scope, thread_id, ns, row[3], row[4], typ, blob, None)
                    now_seen[row[3]] = now_seen[row[3]]._replace(depth=0)
            if blobs:
                tx.executemany(
                    "INSERT INTO langgraph_blobs (scope, thread_id, checkpoint_ns, channel, "
                    "version, type, blob, base, checksum) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT "
                    "(scope, thread_id, checkpoint_ns, channel, version) DO NOTHING",
                    blobs,
                )
            tx.execute(
                "INSERT INTO langgraph_checkpoints (scope, thread_id, checkpoint_ns, "
                "checkpoint_id, parent_id, run_id, created_at, type, checkpoint, "
                "metadata_type, metadata, checksum) "
                f"VALUES (?,?,?,?,?,?,{ts(tx)},?,?,?,?,?) ON CONFLICT "
                "(scope, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                "type=excluded.type, checkpoint=excluded.checkpoint, "
                "metadata_type=excluded.metadata_type, metadata=excluded.metadata, "
                "run_id=excluded.run_id, checksum=excluded.checksum",
                (self.scope, thread_id, ns, checkpoint["id"], parent_id, meta.get("run_id"),
                 now, cp_type, cp_bytes, md_type, md_bytes,
                 checksum(checkpoint["id"], parent_id, cp_type, cp_bytes, md_type, md_bytes)),
            )  # fmt: skip
            if ns == "":
                self._thread_moved(
                    tx, thread_id, checkpoint["id"], now, context,
                    "running" if scheduled else "completed",
                )  # fmt: skip

        self.store.write(op)
        if now_seen:  # only once stored: a later version may build on these
            with self._seen_lock:
                seen.update(now_seen)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes on ``config``'s checkpoint. Special channels
        (error, interrupt, resume, scheduled) replace an earlier write of the
        task; other writes are kept as first stored (LangGraph's rule:
        ``WRITES_IDX_MAP``). An interrupt on the thread's latest root
        checkpoint marks the thread ``waiting``; a root task's error that
        no error handler takes marks it ``failed`` (its invoke raises it)."""
        c = config["configurable"]
        thread_id = str(c["thread_id"])
        ns = c.get("checkpoint_ns", "") or ""
        checkpoint_id = c["checkpoint_id"]
        rows = [
            _write_row(self.scope, thread_id, ns, checkpoint_id, task_id,
                       WRITES_IDX_MAP.get(ch, idx), task_path, ch, *self.serde.dumps_typed(value))
            for idx, (ch, value) in enumerate(writes)
        ]  # fmt: skip
        replace = all(ch in WRITES_IDX_MAP for ch, _ in writes)
        conflict = (
            "DO UPDATE SET channel=excluded.channel, type=excluded.type, blob=excluded.blob, "
            "checksum=excluded.checksum"
            if replace
            else "DO NOTHING"
        )
        asked = [v for ch, v in writes if ch == INTERRUPT]
        answered = any(ch == RESUME for ch, _ in writes)
        failed = ns == "" and _raised(writes)

        def op(tx: SqlTx) -> None:
            if ns == "" and (asked or answered or failed):
                self._lock_thread(tx, thread_id)
            self._refuse_moved(tx, thread_id)
            tx.executemany(
                "INSERT INTO langgraph_writes (scope, thread_id, checkpoint_ns, checkpoint_id, "
                "task_id, idx, task_path, channel, type, blob, checksum) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (scope, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) "
                + conflict,
                rows,
            )
            if ns == "" and (asked or answered):
                self._thread_asked(tx, thread_id, checkpoint_id, asked)
            if failed:
                tx.execute(
                    f"UPDATE langgraph_threads SET status='{FAILED}', owner=NULL, "
                    f"updated_at={ts(tx)} WHERE scope=? AND thread_id=? AND checkpoint_id=? "
                    "AND status='running'",
                    (time.time(), self.scope, thread_id, checkpoint_id),
                )

        self.store.write(op)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: its checkpoints, writes, blobs and thread row."""

        def op(tx: SqlTx) -> None:
            for table in ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes",
                          "langgraph_threads"):  # fmt: skip
                tx.execute(
                    f"DELETE FROM {table} WHERE scope=? AND thread_id=?",
                    (self.scope, str(thread_id)),
                )

        self.store.write(op)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of
        ``run_ids``, their writes, and the blobs no checkpoint still uses."""
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        marks = ",".join("?" * len(ids))

        def op(tx: SqlTx) -> None:
            threads = {
                str(r[0])
                for r in tx.fetchall(
                    "SELECT DISTINCT thread_id FROM langgraph_checkpoints "
                    f"WHERE scope=? AND run_id IN ({marks})",
                    (self.scope, *ids),
                )
            }
            tx.execute(
                "DELETE FROM langgraph_writes WHERE scope=? AND EXISTS (SELECT 1 FROM "
                "langgraph_checkpoints c WHERE c.scope=langgraph_writes.scope AND "
                "c.thread_id=langgraph_writes.thread_id AND "
                "c.checkpoint_ns=langgraph_writes.checkpoint_ns AND "
                f"c.checkpoint_id=langgraph_writes.checkpoint_id AND c.run_id IN ({marks}))",
                (self.scope, *ids),
            )
            tx.execute(
                f"DELETE FROM langgraph_checkpoints WHERE scope=? AND run_id IN ({marks})",
                (self.scope, *ids),
            )
            for thread_id in threads:
                self._collect_blobs(tx, thread_id)

        self.store.write(op)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and blob of one thread (all
        namespaces) to another thread id, with the source's thread row."""
        src, dst = str(source_thread_id), str(target_thread_id)
        tables = {
            "langgraph_checkpoints": "checkpoint_ns, checkpoint_id, parent_id, run_id, "
            "created_at, type, checkpoint, metadata_type, metadata, checksum",
            "langgraph_blobs": "checkpoint_ns, channel, version, type, blob, base, checksum",
            "langgraph_writes": "checkpoint_ns, checkpoint_id, task_id, idx, task_path, "
            "channel, type, blob, checksum",
            "langgraph_threads": "status, created_at, updated_at, owner, context, "
            "interrupts, checkpoint_id",
        }

        def op(tx: SqlTx) -> None:
            for table, cols in tables.items():
                tx.execute(
                    f"INSERT INTO {table} (scope, thread_id, {cols}) "
                    f"SELECT scope, ?, {cols} FROM {table} WHERE scope=? AND thread_id=? "
                    "ON CONFLICT DO NOTHING",
                    (dst, self.scope, src),
                )

        self.store.write(op)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's latest checkpoint (with
        its writes) and the blobs it uses; ``"delete"``: delete the threads.

        Raises:
            ValueError: another strategy.
        """
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return

        def op(tx: SqlTx) -> None:
            for thread_id in map(str, thread_ids):
                latest = tx.fetchall(
                    "SELECT checkpoint_ns, max(checkpoint_id) FROM langgraph_checkpoints "
                    "WHERE scope=? AND thread_id=? GROUP BY checkpoint_ns",
                    (self.scope, thread_id),
                )
                for ns, keep in latest:
                    for table in ("langgraph_writes", "langgraph_checkpoints"):
                        tx.execute(
                            f"DELETE FROM {table} WHERE scope=? AND thread_id=? "
                            "AND checkpoint_ns=? AND checkpoint_id<>?",
                            (self.scope, thread_id, ns, keep),
                        )
                self._collect_blobs(tx, thread_id)

        self.store.write(op)

    # -- LangGraph's contract (async): the sync methods in a worker thread ----

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    # -- helpers ---------------------------------------------------------------

    def _tuple(self, tx: SqlTx, thread_id: str, row: Sequence[Any]) -> CheckpointTuple:
        verify_checkpoint(thread_id, row)
        ns, checkpoint_id, parent_id, cp_type, cp_bytes, md_type, md_bytes, _ = row
        checkpoint = cast(Checkpoint, self.serde.loads_typed((cp_type, _bytes(cp_bytes))))
        values = dict(checkpoint.get("channel_values") or {})
        wanted = [
            (ch, str(v)) for ch, v in checkpoint["channel_versions"].items() if ch not in values
        ]
        if wanted:
            conds = " OR ".join(["(channel=? AND version=?)"] * len(wanted))
            for ch, version, typ, blob, base, sum_ in tx.fetchall(
                "SELECT channel, version, type, blob, base, checksum FROM langgraph_blobs "
                f"WHERE scope=? AND thread_id=? AND checkpoint_ns=? AND ({conds})",
                (self.scope, thread_id, ns, *[x for pair in wanted for x in pair]),
            ):
                _verify_blob(thread_id, ch, version, typ, blob, base, sum_)
                if typ != "empty":
                    values[ch] = self._decode(tx, thread_id, ns, ch, typ, blob, base)
        checkpoint["channel_values"] = values
        writes = tx.fetchall(
            "SELECT task_id, idx, channel, type, blob, checksum FROM langgraph_writes "
            "WHERE scope=? AND thread_id=? AND checkpoint_ns=? AND checkpoint_id=? "
            "ORDER BY task_path, task_id, idx",
            (self.scope, thread_id, ns, checkpoint_id),
        )
        for task_id, idx, ch, typ, blob, sum_ in writes:
            if checksum(checkpoint_id, task_id, idx, ch, typ, _bytes(blob)) != sum_:
                raise ThreadCorruptError(thread_id, f"pending write {task_id}/{idx}")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed((md_type, _bytes(md_bytes))),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent_id,
                    }
                }
                if parent_id
                else None
            ),
            pending_writes=[
                (str(t), str(ch), self.serde.loads_typed((typ, _bytes(b))))
                for t, _, ch, typ, b, _ in writes
            ],
        )

    def _context(self, configurable: dict[str, Any], thread_id: str) -> str:
        """The thread's ExecutionContext ids as stored (JSON).

        Raises:
            InputError: the ``configurable``'s ``trace_id`` is not a W3C
                trace id (:func:`~desktop_app.flow.context.trace_id_problem`),
                or one of these ids is not a string (it was dropped
                silently: ``123`` for ``trace_id``); nothing was stored.
        """
        ids = self.context.model_dump()
        for name in _ENTRY_FIELDS:
            given = configurable.get(name)
            if given is not None and not isinstance(given, str):
                raise InputError(
                    f"the configurable's {name} is {type(given).__name__} {given!r}, not a "
                    "string: give it as text, or leave it out; nothing was stored"
                )
            if given is not None:
                ids[name] = given
        if isinstance(ids["trace_id"], str) and (problem := trace_id_problem(ids["trace_id"])):
            raise InputError(f"the configurable's {problem}")
        ids["run_id"] = thread_id
        return json.dumps({k: v for k, v in ids.items() if v is not None}, sort_keys=True)

    def _claim(self, thread_id: str, checkpoint_id: str) -> None:
        """An invoke is about to run the thread from its latest checkpoint:
        record this process as its owner. A resumed invoke (after a crash,
        or after an answer stored through Flowdesk) runs the pending step
        before it stores any checkpoint, so until then the row would name
        the dead process (``interrupted``) or say ``answered``: it becomes
        ``running``. A ``waiting`` thread stays ``waiting`` (the invoke may
        be a ``Command(resume=...)`` or not) but is owned: ``db copy``
        refuses a thread whose owner lives, so it never moves a thread
        whose nodes this process is about to run here. Only at the
        checkpoint this invoke loaded (a newer one written meanwhile wins).

        Raises:
            ThreadMovedError: ``db copy`` moved the thread since this invoke
                read it (checked in the claim's write transaction, which the
                copy's marking serialises with): no node runs here.
        """
        marks = ",".join("?" * len(_RESUMABLE))

        def op(tx: SqlTx) -> None:
            self._refuse_moved(tx, thread_id)
            tx.execute(
                "UPDATE langgraph_threads SET status='running', owner=?, interrupts=NULL, "
                f"updated_at={ts(tx)} WHERE scope=? AND thread_id=? AND checkpoint_id=? "
                f"AND status IN ({marks}) AND (owner IS NULL OR owner<>?)",
                (self.owner, time.time(), self.scope, thread_id, checkpoint_id,
                 *_RESUMABLE, self.owner),
            )  # fmt: skip
            tx.execute(
                f"UPDATE langgraph_threads SET owner=?, updated_at={ts(tx)} WHERE scope=? "
                "AND thread_id=? AND checkpoint_id=? AND status='waiting' "
                "AND (owner IS NULL OR owner<>?)",
                (self.owner, time.time(), self.scope, thread_id, checkpoint_id, self.owner),
            )

        self.store.write(op)

    def _lock_thread(self, tx: SqlTx, thread_id: str) -> None:
        """Serialise the transactions that judge a thread's status. LangGraph
        stores a step's checkpoint and its interrupt from two threads at once;
        on PostgreSQL (READ COMMITTED) neither would see the other's rows and
        the thread could stay ``running`` while it waits. SQLite has one
        writer at a time already."""
        if tx.dialect == "postgres":
            tx.execute(
                "SELECT 1 FROM langgraph_threads WHERE scope=? AND thread_id=? FOR UPDATE",
                (self.scope, thread_id),
            )

    def _refuse_moved(self, tx: SqlTx, thread_id: str) -> None:
        """Refuse a thread ``flowdesk db copy`` moved from this SQLite file to
        PostgreSQL (its row's owner says ``moved to URL``): its program
        continues it there, and a step run here as well would run its
        nodes twice. Only a SQLite file holds such marks (a copy's source
        is always one), so PostgreSQL reads nothing more.

        Raises:
            ThreadMovedError: it moved (nothing of this transaction is written).
        """
        if tx.dialect == "postgres":
            return
        row = tx.fetchone(
            "SELECT status, owner FROM langgraph_threads WHERE scope=? AND thread_id=?",
            (self.scope, thread_id),
        )
        if row is not None:
            refuse_moved(thread_id, str(row[0]), row[1], self.scope)

    def _thread_moved(
        self, tx: SqlTx, thread_id: str, checkpoint_id: str, now: float, context: str, status: str
    ) -> None:
        """The thread's row after a root checkpoint: ``status`` unless the
        checkpoint already holds an unanswered interrupt. LangGraph stores a
        step's checkpoint and its tasks' writes from concurrent background
        threads, so an interrupt may commit before its checkpoint does; the
        row never moves back to an older checkpoint."""
        interrupts = None
        writes = tx.fetchall(
            "SELECT channel, type, blob FROM langgraph_writes WHERE scope=? AND thread_id=? "
            "AND checkpoint_ns='' AND checkpoint_id=? AND channel IN (?, ?)",
            (self.scope, thread_id, checkpoint_id, INTERRUPT, RESUME),
        )
        asked = [
            self.serde.loads_typed((str(t), _bytes(b))) for ch, t, b in writes if ch == INTERRUPT
        ]
        if asked and not any(ch == RESUME for ch, _, _ in writes):
            status, interrupts = "waiting", _interrupt_values(asked)
        owner = self.owner if status == "running" else None
        tx.execute(
            "INSERT INTO langgraph_threads (scope, thread_id, status, created_at, updated_at, "
            "owner, context, interrupts, checkpoint_id) "
            f"VALUES (?,?,?,{ts(tx)},{ts(tx)},?,?,?,?) "
            "ON CONFLICT (scope, thread_id) DO UPDATE SET status=excluded.status, "
            "updated_at=excluded.updated_at, owner=excluded.owner, "
            "interrupts=excluded.interrupts, checkpoint_id=excluded.checkpoint_id "
            "WHERE langgraph_threads.checkpoint_id IS NULL "
            "OR langgraph_threads.checkpoint_id <= excluded.checkpoint_id",
            (self.scope, thread_id, status, now, now, owner, context, interrupts, checkpoint_id),
        )

    def _thread_asked(
        self, tx: SqlTx, thread_id: str, checkpoint_id: str, asked: Sequence[Any]
    ) -> None:
        """An interrupt (or its answer) on the latest root checkpoint. The
        thread's questions are every task's interrupt on that checkpoint:
        tasks run in parallel (two nodes each calling ``interrupt()``) store
        theirs one task at a time, and the row kept only the last one's."""
        if asked:
            stored = tx.fetchall(
                "SELECT type, blob FROM langgraph_writes WHERE scope=? AND thread_id=? "
                "AND checkpoint_ns='' AND checkpoint_id=? AND channel=? ORDER BY task_id, idx",
                (self.scope, thread_id, checkpoint_id, INTERRUPT),
            )
            every = [self.serde.loads_typed((str(t), _bytes(b))) for t, b in stored]
            tx.execute(
                "UPDATE langgraph_threads SET status='waiting', owner=NULL, interrupts=?, "
                f"updated_at={ts(tx)} WHERE scope=? AND thread_id=? AND checkpoint_id=?",
                (_interrupt_values(every), time.time(), self.scope, thread_id, checkpoint_id),
            )
        else:
            tx.execute(
                "UPDATE langgraph_threads SET status='running', owner=?, interrupts=NULL, "
                f"updated_at={ts(tx)} WHERE scope=? AND thread_id=? AND checkpoint_id=?",
                (self.owner, time.time(), self.scope, thread_id, checkpoint_id),
            )

    def _collect_blobs(self, tx: SqlTx, thread_id: str) -> None:
        """Delete the thread's blobs that no remaining checkpoint uses."""
        used: set[tuple[str, str, str]] = set()
        for row in tx.fetchall(
            f"SELECT {CHECKPOINT_COLUMNS} FROM langgraph_checkpoints WHERE scope=? AND thread_id=?",
            (self.scope, thread_id),
        ):
            verify_checkpoint(thread_id, row)
            ns = row[0]
            body = self.serde.loads_typed((row[3], _bytes(row[4])))
            used.update((str(ns), ch, str(v)) for ch, v in body["channel_versions"].items())
        bases = {
            (str(ns), str(ch), str(v)): base
            for ns, ch, v, base in tx.fetchall(
                "SELECT checkpoint_ns, channel, version, base FROM langgraph_blobs "
                "WHERE scope=? AND thread_id=?",
                (self.scope, thread_id),
            )
        }
        for ns, ch, v in list(used):  # a kept list keeps the versions it extends
            base = bases.get((ns, ch, v))
            while base is not None and (ns, ch, base) not in used:
                used.add((ns, ch, base))
                base = bases.get((ns, ch, base))
        stale = [(self.scope, thread_id, *key) for key in bases if key not in used]
        if stale:
            tx.executemany(
                "DELETE FROM langgraph_blobs WHERE scope=? AND thread_id=? AND checkpoint_ns=? "
                "AND channel=? AND version=?",
                stale,
            )

    def _remembered(self, thread_id: str, ns: str) -> dict[str, _Seen]:
        """The last list values stored for this thread's namespace (LRU)."""
        with self._seen_lock:
            key = (thread_id, ns)
            seen = self._seen.setdefault(key, {})
            self._seen.move_to_end(key)
            while len(self._seen) > REMEMBERED_THREADS:
                self._seen.popitem(last=False)
            return seen

    def _encode(
        self, value: Any, version: str, last: _Seen | None, channel: str, now: dict[str, _Seen]
    ) -> tuple[str, bytes, str | None]:
        """``(type, blob, base)`` of one channel version: a list that only
        grew since ``last`` as its new items on top of ``last.version``."""
        if not isinstance(value, list):
            typ, blob = self.serde.dumps_typed(value)
            return typ, blob, None
        items = [self.serde.dumps_typed(item) for item in value]
        n = len(last.items) if last is not None else 0
        if (
            last is not None
            and last.version != version
            and last.depth < MAX_CHAIN
            and len(items) >= n
            and items[:n] == last.items
        ):
            typ, blob = self.serde.dumps_typed(value[n:])
            now[channel] = _Seen(version, items, last.depth + 1)
            return APPEND + typ, blob, last.version
        typ, blob = self.serde.dumps_typed(value)
        now[channel] = _Seen(version, items, 0)
        return typ, blob, None

    def _has_blob(self, tx: SqlTx, thread_id: str, ns: str, channel: str, version: str) -> bool:
        return (
            tx.fetchone(
                "SELECT 1 FROM langgraph_blobs WHERE scope=? AND thread_id=? AND "
                "checkpoint_ns=? AND channel=? AND version=?",
                (self.scope, thread_id, ns, channel, version),
            )
            is not None
        )

    def _decode(
        self, tx: SqlTx, thread_id: str, ns: str, channel: str, typ: str, blob: Any, base: Any
    ) -> Any:
        """A stored channel value; a list's new items joined to the versions
        they extend (read in one query: the chain's versions are the
        channel's highest below this one, unless a fork interleaves)."""
        if not typ.startswith(APPEND):
            return self.serde.loads_typed((typ, _bytes(blob)))
        parts = [(typ, blob)]
        rows = {
            str(v): (str(t), b, bs)
            for v, t, b, bs, sum_ in tx.fetchall(
                "SELECT version, type, blob, base, checksum FROM langgraph_blobs WHERE scope=? AND "
                "thread_id=? AND checkpoint_ns=? AND channel=? AND version<=? "
                f"ORDER BY version DESC LIMIT {MAX_CHAIN + 1}",
                (self.scope, thread_id, ns, channel, base),
            )
            if _verify_blob(thread_id, channel, str(v), str(t), b, bs, sum_)
        }
        while base is not None:
            row = rows.get(str(base))
            if row is None:  # a fork's chain: one version at a time
                found = tx.fetchone(
                    "SELECT type, blob, base, checksum FROM langgraph_blobs WHERE scope=? AND "
                    "thread_id=? "
                    "AND checkpoint_ns=? AND channel=? AND version=?",
                    (self.scope, thread_id, ns, channel, base),
                )
                if found is None:
                    raise StoreError(
                        f"LangGraph thread {thread_id}: channel {channel!r} extends version "
                        f"{base}, which is missing from langgraph_blobs"
                    )
                _verify_blob(thread_id, channel, str(base), *found)
                row = (str(found[0]), found[1], found[2])
            parts.append((row[0], row[1]))
            base = row[2] if row[0].startswith(APPEND) else None
        whole_type, whole = parts.pop()
        value = list(self.serde.loads_typed((whole_type, _bytes(whole))))
        for part_type, part in reversed(parts):
            value.extend(self.serde.loads_typed((part_type[len(APPEND) :], _bytes(part))))
        return value


def _verify_blob(
    thread_id: str, channel: str, version: str, typ: str, blob: Any, base: Any, sum_: Any
) -> bool:
    """True when a blob row matches its checksum; raises ThreadCorruptError otherwise."""
    if checksum(channel, version, typ, None if blob is None else _bytes(blob), base) != sum_:
        raise ThreadCorruptError(thread_id, f"channel {channel!r} version {version}")
    return True


def _blob_row(
    scope: str,
    thread_id: str,
    ns: str,
    channel: str,
    version: str,
    typ: str,
    blob: bytes,
    base: str | None,
) -> tuple[Any, ...]:
    return (scope, thread_id, ns, channel, version, typ, blob, base,
            checksum(channel, version, typ, blob, base))  # fmt: skip


def _write_row(
    scope: str,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    idx: int,
    task_path: str,
    channel: str,
    typ: str,
    blob: bytes,
) -> tuple[Any, ...]:
    return (scope, thread_id, ns, checkpoint_id, task_id, idx, task_path, channel, typ, blob,
            checksum(checkpoint_id, task_id, idx, channel, typ, blob))  # fmt: skip


def _interrupt_values(asked: Sequence[Any]) -> str:
    """The ``interrupts`` column for interrupt writes (each a list of
    ``Interrupt``): their values and ids (:func:`threads.interrupts_json`)."""
    return interrupts_json([i for batch in asked for i in _as_list(batch)])


def _as_list(value: Any) -> Sequence[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]
