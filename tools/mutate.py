"""Mutation testing of the durable core with mutmut, one module at a time.

Usage: python tools/mutate.py [MODULE ...] [--jobs N] [--survivors] [--functions F,G] [--summary]

For each module (default: every module in ``TESTS_FOR``) this copies the
checkout's files (``git ls-files``: what a fresh clone has, plus local edits)
to ``.mutation/<module>/``, appends a ``[tool.mutmut]`` section that mutates
only that module and selects only the tests mapped to it, runs
``mutmut run`` there, and prints the kill rate and the surviving mutants
(their diffs in ``.mutation/<module>/survivors.diff``). Mutants listed in
``tools/mutation_equivalent.txt`` (``name: reason``) are counted apart, never
as killed.

Each module's figures (mutants, killed, equivalent, survivors, kill rate, wall
time, the commit) are kept in ``.mutation/<module>/figures.json``; after a run
the table of every module that has figures is printed and written to
``.mutation/summary.txt``, so modules can be run one at a time on a busy
machine and the table still covers all of them (``--summary`` prints it
without running anything).

``--survivors`` re-runs only the previous run's survivors of each module, in
its existing ``.mutation/<module>/`` copy with the checkout's current tests
and equivalent list. Adding tests cannot revive a killed mutant, so this
confirms new kills in minutes instead of re-running the whole module; the
figures then say ``survivors re-run`` and keep the full run's wall time.

Why mutmut: it switches mutants with an environment variable
(``MUTANT_UNDER_TEST``) read at call time by trampolines in a copied tree
(``mutants/``). The SIGKILL crash workers inherit that variable and import
the same copied tree (they put their parent folder first on ``sys.path``),
so crash tests in real subprocesses see the mutant too. It also records
which tests reach each function and runs only those per mutant, which keeps a
module's run short on two cores. Its limit: that record is made in-process,
so a function reached *only* inside a subprocess shows as "no tests" and is
reported as a survivor to look at, not silently dropped.

Exit status: 0 when every module was run (survivors are a report, not a
failure), 2 on a usage error, 1 when mutmut itself failed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENT = ROOT / "tools" / "mutation_equivalent.txt"
SUMMARY = WORK / "summary.txt"

_ENGINE = [
    "tests/test_engine_basics.py",
    "tests/test_engine_scenarios.py",
    "tests/test_engine_crash.py",
    "tests/test_crash_real.py",
    "tests/test_core_gaps.py",
]
_STORE = [
    "tests/contract/",
    "tests/test_schema.py",
    "tests/test_state_codec.py",
    "tests/test_leases.py",
    "tests/test_waits.py",
]

#: module -> the tests that exercise it (a fast, targeted selection; mutmut
#: narrows it further to the tests that reach each mutated function).
TESTS_FOR: dict[str, list[str]] = {
    "desktop_app/flow/retry.py": [
        "tests/test_engine_basics.py",
        "tests/test_engine_scenarios.py",
        "tests/test_core_gaps.py",
        "tests/test_provider.py",
    ],
    "desktop_app/flow/clock.py": [
        *_ENGINE,
        "tests/test_waits.py",
        "tests/test_mutation_kills_clock.py",
        # CheckedClock against a real SQLite file's file system clock (faketime)
        "tests/test_clock_skew_sqlite.py",
    ],
    "desktop_app/flow/context.py": [
        *_ENGINE,
        "tests/test_context.py",
        "tests/test_mutation_kills_context.py",
        "tests/test_step_revisits.py",
        # a domain query the database refuses fails the step (DomainReadError)
        "tests/test_step_query_refused.py",
    ],
    "desktop_app/flow/definition.py": [
        *_ENGINE,
        "tests/test_step_durations.py",
        "tests/test_mutation_kills_definition.py",
        "tests/test_step_revisits.py",
    ],
    "desktop_app/flow/driver.py": [
        *_ENGINE,
        "tests/test_waits.py",
        "tests/test_leases.py",
        "tests/contract/test_races.py",
        "tests/test_mutation_kills_driver_structure.py",
        "tests/test_mutation_kills_driver_waits.py",
        "tests/test_parallel_route_waits.py",
        "tests/test_mutation_kills_driver_failures.py",
        "tests/test_mutation_kills_driver_more.py",
        "tests/test_parallel_sibling_answers.py",
        "tests/test_nested_answers_forgotten.py",
        "tests/test_step_revisits.py",
        "tests/test_wait_begin_failures.py",
        "tests/test_route_failures.py",
        "tests/test_mutation_kills_driver_resolution.py",
        "tests/test_mutation_kills_driver_visits.py",
        # the survivors of the driver's full run after the run-core split
        "tests/test_mutation_kills_driver_resume.py",
        # the lean step path (run_lean, take_output) and a lean step's
        # failing commit (DomainWriteError, StateNotStorableError)
        "tests/test_lean_step.py",
        "tests/test_failing_commit.py",
        "tests/test_mutation_kills_driver_lean.py",
        # a cancel or a lease taken over between two steps (_drive's check)
        "tests/test_mutation_kills_driver_between_steps.py",
        # a cancel during a retry backoff, a step named in its error, a
        # revisited step's start and each checkpoint's time (attempt,
        # invoke, complete); a run's context on resume (__init__)
        "tests/test_mutation_kills_driver_steps.py",
        "tests/test_context.py",
    ],
    "desktop_app/flow/engine.py": [
        *_ENGINE,
        "tests/test_delete_on_success_outbox.py",
        "tests/test_changed_flow_stuck.py",
        "tests/test_waits.py",
        "tests/test_leases.py",
        "tests/contract/test_races.py",
        "tests/test_group_commit.py",
        "tests/test_reliability_children.py",
        "tests/test_reliability_engine.py",
        "tests/test_claiming.py",
        "tests/test_context.py",
        "tests/test_power_loss.py",
        "tests/test_postgres_workers.py",
        "tests/test_mutation_kills_children.py",
        "tests/test_mutation_kills_driver_structure.py",
        "tests/test_mutation_kills_driver_waits.py",
        "tests/test_mutation_kills_engine_children.py",
        "tests/test_mutation_kills_engine_fork.py",
        "tests/test_mutation_kills_engine_recover.py",
        "tests/test_mutation_kills_engine_replay.py",
        "tests/test_step_revisits.py",
        "tests/test_mutation_kills_engine_pool.py",
        "tests/test_mutation_kills_engine_claims.py",
        "tests/test_mutation_kills_engine_leases.py",
        "tests/test_mutation_kills_engine_pool_more.py",
        "tests/test_route_failures.py",
        "tests/test_mutation_kills_engine_doubt.py",
        # they kill engine mutants too (resume_with's store, claim_runnable's
        # presumed_alive, incompatible_runs' lease clock): seen 2026-12-04
        "tests/test_mutation_kills_answers.py",
        "tests/test_mutation_kills_replay.py",
        "tests/test_ownership_liveness.py",
        # a cancel racing an answer, a wake-up or a tick
        "tests/test_cancel_races.py",
        # cancel_withdrawing: the queued side effects a cancel withdraws
        "tests/test_cancel_withdraws.py",
        # the survivors of the engine's full run after the run-core split
        "tests/test_mutation_kills_engine.py",
        "tests/test_resume_while_executing.py",
        # one thread of an engine has a run in hand at a time (_in_hand_here, holds)
        "tests/test_serve_threads.py",
        "tests/test_mutation_kills_driver_more.py",
        "tests/test_mutation_kills_engine_in_hand.py",
        # signal/publish: the payload's refusal, the runs judged and woken
        "tests/test_mutation_kills_engine_signals.py",
    ],
    "desktop_app/flow/events.py": [
        *_ENGINE,
        "tests/test_tracing.py",
        "tests/test_mutation_kills_events.py",
    ],
    "desktop_app/flow/children.py": [
        "tests/test_reliability_children.py",
        "tests/test_agent.py",
        "tests/test_engine_scenarios.py",
        "tests/test_mutation_kills_children.py",
    ],
    "desktop_app/flow/outbox.py": [
        "tests/test_outbox.py",
        "tests/test_delete_on_success_outbox.py",
        "tests/test_races_processes.py",
        "tests/test_claiming.py",
        "tests/test_tidy.py",
        "tests/test_folder_confinement.py",
        "tests/test_mutation_kills_outbox.py",
        "tests/test_outbox_settle.py",
        "tests/test_cancel_withdraws.py",
        # a live claimant keeps its claim; the claim renewed while sending
        "tests/test_outbox_live_claimant.py",
        # a store error ends the pass; a full disk's words are a delivery's
        "tests/test_outbox_store_error_stops.py",
    ],
    "desktop_app/flow/state.py": [
        *_ENGINE,
        "tests/test_state_codec.py",
        "tests/test_reliability_engine.py",
        "tests/test_mutation_kills_state.py",
        # upgraded_state: a run moved onto a newer state model
        "tests/test_mutation_kills_upgraded_state.py",
    ],
    "desktop_app/flow/tracing.py": [
        "tests/test_tracing.py",
        "tests/test_mutation_kills_tracing.py",
    ],
    # in-process Worker tests first (mutmut maps them to every function); the
    # multi-process ones drive it only inside pg_worker.py subprocesses
    "desktop_app/flow/worker.py": [
        "tests/test_worker_inprocess.py",
        "tests/test_mutation_kills_worker.py",
        "tests/test_postgres_workers.py",
    ],
    # who owns a claim, and whether that process is gone (recovery's test)
    "desktop_app/flow/owners.py": [
        "tests/test_leases.py",
        "tests/test_claiming.py",
        "tests/test_crash_real.py",
        "tests/test_outbox.py",
        "tests/test_mutation_kills_outbox.py",
        "tests/test_mutation_kills_engine_leases.py",
        "tests/test_mutation_kills_owners.py",
    ],
    "desktop_app/store/codec.py": [
        *_STORE,
        "tests/test_mutation_kills_codec.py",
        # the orjson fast path against the standard library's text
        "tests/test_codec_fast_json.py",
    ],
    # the records every store returns: their JSON forms, ids and lease TTLs
    "desktop_app/store/records.py": [
        *_STORE,
        "tests/test_store_seam.py",
        "tests/test_engine_basics.py",
        "tests/test_mutation_kills_engine_replay.py",
        "tests/test_agent.py",
        "tests/test_mutation_kills_records.py",
        # _quick_init: the step path's records, built as dataclasses would
        "tests/test_mutation_kills_records_init.py",
    ],
    "desktop_app/store/connection.py": [
        *_STORE,
        "tests/test_faults.py",
        "tests/test_reliability_store.py",
        "tests/test_mutation_kills_connection.py",
    ],
    "desktop_app/store/memory/store.py": [
        "tests/contract/",
        "tests/test_store_seam.py",
        "tests/test_mutation_kills_memory.py",
    ],
    "desktop_app/store/memory/agent_runs.py": ["tests/contract/", "tests/test_store_seam.py"],
    "desktop_app/store/migrations.py": [
        "tests/test_schema.py",
        "tests/test_postgres_schema.py",
        "tests/test_export_doctor.py",
        "tests/test_mutation_kills_migrations.py",
    ],
    "desktop_app/store/runids.py": [
        "tests/test_cli.py",
        "tests/test_cli_scriptable.py",
        "tests/test_mutation_kills_runids.py",
    ],
    # its Protocol classes are signatures only and carry "# pragma: no mutate
    # block": mutmut's trampolines would add members to each runtime-checkable
    # protocol, which isinstance() then requires of every store. Left: SqlResult,
    # which every domain SQL read goes through
    "desktop_app/store/protocol.py": [
        "tests/contract/test_builtin_domain_writes.py",
        "tests/contract/test_conformance.py",
        "tests/test_digest.py",
        "tests/test_tidy.py",
        "tests/test_mutation_kills_protocol.py",
    ],
    # the contract suite runs every test on PostgreSQL too (a real server:
    # tests/pg_support.py starts one); mutmut runs a PostgreSQL mutant only
    # through the tests that reach its function, which are those cases
    "desktop_app/store/postgres/store.py": [
        "tests/contract/",
        "tests/test_postgres_store.py",
        "tests/test_postgres_surface.py",
        "tests/test_postgres_agent_runs.py",
        # claim_for_worker is reached in-process only here
        "tests/test_worker_inprocess.py",
        "tests/test_mutation_kills_worker.py",
        # apply/status/verify of the schema
        "tests/test_postgres_schema.py",
        "tests/test_postgres_app_push.py",
        "tests/test_mutation_kills_postgres.py",
        "tests/test_mutation_kills_postgres_store.py",
        # the write path (_append, append, create_run): behind a transaction pooler
        "tests/test_mutation_kills_pgstore_writes.py",
        # the round trips a step costs (_transaction's opening pipeline,
        # one pooled connection per transaction): a mutant that adds one
        "tests/test_postgres_round_trips.py",
        # the transaction code, stop_waiting, the reads and the rest
        "tests/test_mutation_kills_pgstore_tx.py",
        # opening a store: its sessions, their name, where it listens
        "tests/test_mutation_kills_pgstore_open.py",
        # the one-statement append and create_run: a lost reply settled by
        # the row written, what must go in a transaction, a silent host
        "tests/test_mutation_kills_pgstore_one_trip.py",
        # a lost COMMIT asked about after a crash or restart (an id handed
        # out again, not handed out yet, no longer known), what the log says
        # of a settled one; a cancel's withdrawal and its wake-up
        "tests/test_postgres_commit_xid_reused.py",
        "tests/test_mutation_kills_pgstore_settle.py",
        # every field a run is created with, its lease, its lost COMMIT
        "tests/test_mutation_kills_pgstore_create.py",
        # opening a store, second pass: the default scope, one idle session,
        # a read's lost COMMIT behind a pooler
        "tests/test_mutation_kills_pgstore_init.py",
        # a step's append: the run's error, a lost lease over a missing revision
        "tests/test_mutation_kills_pgstore_append.py",
        # claim_runnable's windows: at most limit runs over two rounds, none
        # twice, the first round's takeover logged
        "tests/test_mutation_kills_pgstore_claim.py",
        # how long a command, a worker and a stopping process wait for an
        # unreachable server (give_up_once, stop_waiting)
        "tests/test_mutation_kills_pgstore_give_up.py",
    ],
    "desktop_app/store/postgres/sql.py": [
        "tests/test_mutation_kills_postgres_sql.py",
        "tests/contract/",
        "tests/test_postgres_store.py",
        "tests/test_mutation_kills_postgres.py",
        "tests/test_postgres_schema.py",
    ],
    "desktop_app/store/postgres/notify.py": [
        "tests/test_mutation_kills_postgres_notify.py",
        "tests/test_postgres_app_push.py",
        "tests/test_mutation_kills_postgres.py",
        "tests/test_worker_inprocess.py",
        "tests/test_mutation_kills_worker.py",
        "tests/contract/",
    ],
    "desktop_app/store/postgres/agent_runs.py": [
        "tests/contract/",
        "tests/test_postgres_agent_runs.py",
        "tests/test_mutation_kills_postgres_agent_runs.py",
    ],
    "desktop_app/store/postgres/copy.py": [
        "tests/test_postgres_copy.py",
        "tests/test_mutation_kills_postgres_copy.py",
    ],
    "desktop_app/store/postgres/doctor.py": [
        "tests/test_postgres_surface.py",
        "tests/test_mutation_kills_postgres_doctor.py",
    ],
    "desktop_app/store/sqlite/store.py": [
        *_STORE,
        "tests/test_outbox.py",
        "tests/test_races_processes.py",
        "tests/test_tidy.py",
        "tests/test_claiming.py",
        "tests/test_group_commit.py",
        "tests/test_reliability_store.py",
        "tests/test_mutation_kills_rows.py",
        "tests/test_mutation_kills_sqlite.py",
        "tests/test_mutation_kills_sqlite_store.py",
        # query(): what SQLite refuses is a QueryRefusedError
        "tests/test_step_query_refused.py",
        # an append of a given checkpoint (the engine's: _append_sql,
        # checkpoint_parts) and what it caches
        "tests/test_lean_step.py",
        # checkpoint_checksum at every clock value, an append's cost
        "tests/test_step_cost.py",
        "tests/test_mutation_kills_sqlite_lean.py",
        # _transact, _create_in, _append_in: a run's creation and a step's append
        "tests/test_mutation_kills_sqlite_step.py",
        # _Write: the WAL given back by the first commit after a full disk
        "tests/test_mutation_kills_sqlite_write.py",
        # create_run, _create, append_batch: a creation's writes and errors,
        # a full disk in mid-batch on a plain apsw connection
        "tests/test_mutation_kills_sqlite_create.py",
        # _append: the cache holds the store's own copy, not the writer's
        "tests/test_mutation_kills_sqlite_append.py",
        # claim_runnable's windows and takeover log, claim_intents, a failed
        # write's error, query's refusal, prune, open_store of a missing folder
        "tests/test_mutation_kills_sqlite_claims.py",
        # _write's on_constraint: a duplicate agent run
        "tests/test_mutation_kills_agent_runs.py",
    ],
    "desktop_app/store/rows.py": [
        *_STORE,
        "tests/test_agent.py",
        "tests/test_mutation_kills_rows.py",
        # step_json field by field, checkpoint_parts, _flat_json
        "tests/test_lean_step.py",
        "tests/test_step_cost.py",
        "tests/test_mutation_kills_sqlite_lean.py",
    ],
    "desktop_app/store/group_commit.py": [
        "tests/test_group_commit.py",
        "tests/contract/test_append_batch.py",
        "tests/test_leases.py",
        "tests/test_waits.py",
        "tests/test_claiming.py",
        "tests/test_reliability_store.py",
        "tests/test_mutation_kills_group_commit.py",
    ],
    # the cross-process write gate and the gated connection's transactions
    # (begin_write/end_write: a step's append and a run's creation)
    "desktop_app/store/write_gate.py": [
        "tests/test_write_gate.py",
        "tests/test_mutation_kills_sqlite_lean.py",
        "tests/test_mutation_kills_write_gate.py",
        # Ctrl-Z in process (and a forked child), the locked error's holder
        "tests/test_mutation_kills_write_gate_stop.py",
        # threads and paths of one process: the busy timeout, nesting, one gate per file
        "tests/test_mutation_kills_write_gate_threads.py",
        # a connection opened on a VFS of the test's (GatedConnection's kwargs)
        "tests/test_power_loss.py",
        "tests/test_ctrl_c_inside_the_write_gate.py",
    ],
    "desktop_app/store/domain/digest.py": [
        "tests/test_digest.py",
        "tests/test_mutation_kills_digest.py",
    ],
    "desktop_app/store/domain/tidy.py": [
        "tests/test_tidy.py",
        "tests/test_cli_tidy.py",
        "tests/test_mutation_kills_tidy.py",
    ],
    "desktop_app/store/sqlite/agent_runs.py": [
        "tests/contract/",
        "tests/test_agent.py",
        "tests/test_agent_crash.py",
        "tests/test_mutation_kills_agent_runs.py",
    ],
    # the SQL both built-in stores run, rendered at import: its statements
    # are reached through the SQLite and PostgreSQL halves of the contract
    # suite and the two agent-run stores' tests
    "desktop_app/store/statements.py": [
        "tests/contract/",
        "tests/test_mutation_kills_agent_runs.py",
        "tests/test_postgres_agent_runs.py",
        "tests/test_mutation_kills_statements.py",
    ],
    "desktop_app/agent/leases.py": [
        "tests/test_agent.py",
        "tests/test_agent_crash.py",
        "tests/test_mutation_kills_runtime.py",
        "tests/test_mutation_kills_runtime_more.py",
    ],
    # the client side of MCP runs in the test process (the servers are
    # subprocesses: tests/mcp_servers/, tests/mcp_notes_server.py)
    "desktop_app/agent/mcp.py": [
        "tests/test_mcp_tools.py",
        "tests/test_mcp_outcomes.py",
        "tests/test_tool_approval.py",
        "tests/test_agent_untrusted.py",
        "tests/test_mutation_kills_mcp.py",
    ],
    # an answer's lease (claimed_to_answer, under `flowdesk answer` and the
    # app's answer) and the app's hand-over to the workers on PostgreSQL
    "desktop_app/agent/recovery.py": [
        "tests/test_app_inbox_stale.py",
        "tests/test_app_agent_recovery.py",
        "tests/test_postgres_app_agent_answer.py",
        "tests/test_mutation_kills_agent_recovery.py",
        # the recorded tool sources, interrupted runs, the resume with them
        "tests/test_mutation_kills_agent_recovery_resume.py",
        # a registered Pydantic AI agent's resume and approvals, racing
        # answers and cancels, the tools a resumed run gets back
        "tests/test_mutation_kills_agent_recovery_registered.py",
    ],
    # the app's quit: the Pydantic AI runs it drives stop once their call ends
    "desktop_app/agent/drives.py": ["tests/test_agent_drives.py"],
    "desktop_app/agent/runtime.py": [
        "tests/test_agent.py",
        "tests/test_agent_crash.py",
        "tests/test_provider.py",
        "tests/test_mcp_tools.py",
        "tests/test_reliability_children.py",
        "tests/test_reliability_store.py",
        "tests/test_mutation_kills_runtime.py",
        "tests/test_mutation_kills_runtime_more.py",
        "tests/test_mutation_kills_runtime_cancel.py",
        "tests/test_mutation_kills_runtime_turns.py",
        "tests/test_mutation_kills_runtime_tools.py",
        # answer_writes and record_input (an answer recorded before the servers start)
        "tests/test_mutation_kills_agent_recovery.py",
    ],
}
# the parts split out of the driver and the engine: exercised by the tests
# of the code they were part of
for _part, _were in (
    ("saving", ("driver",)),
    ("waiting", ("driver",)),
    ("answers", ("driver", "engine")),
    ("recovery", ("engine",)),
    ("replay", ("engine",)),
    ("pool", ("engine",)),
    # the run-core renovation's modules (dd1d248, 020ab9b, 75b9d73)
    ("step_call", ("driver",)),
    ("wait_kinds", ("driver",)),
    ("composite", ("driver",)),
    ("run", ("driver", "engine")),
):
    TESTS_FOR[f"desktop_app/flow/{_part}.py"] = list(
        dict.fromkeys(t for w in _were for t in TESTS_FOR[f"desktop_app/flow/{w}.py"])
    )
# their own kill tests
TESTS_FOR["desktop_app/flow/answers.py"].append("tests/test_mutation_kills_answers.py")
# questions of parallel branches (their order)
TESTS_FOR["desktop_app/flow/composite.py"].append("tests/test_mutation_kills_answers.py")
TESTS_FOR["desktop_app/flow/waiting.py"].append("tests/test_mutation_kills_waiting.py")
TESTS_FOR["desktop_app/flow/replay.py"].append("tests/test_mutation_kills_replay.py")
# the checks of the 2026-12-07 session: a deleted checkpoint row is damage
# (rows.chain_gap, the SQLite store's _load), a state changed in place or a
# field the model lacks is refused (state.py, the driver's take_output,
# replay_seed), an outbox intent's last error is kept (failed_intents)
for _module, _tests in (
    (
        "desktop_app/store/rows.py",
        ["tests/test_deleted_checkpoint.py", "tests/test_mutation_kills_store_damage.py"],
    ),
    (
        "desktop_app/store/sqlite/store.py",
        [
            "tests/test_deleted_checkpoint.py",
            "tests/test_show_intent_error.py",
            "tests/test_mutation_kills_store_damage.py",
        ],
    ),
    ("desktop_app/store/postgres/store.py", ["tests/test_mutation_kills_store_damage.py"]),
    (
        "desktop_app/flow/state.py",
        [
            "tests/test_state_changed_in_place.py",
            "tests/test_fork_unknown_field.py",
            "tests/test_state_model_changed.py",
        ],
    ),
    ("desktop_app/flow/driver.py", ["tests/test_state_changed_in_place.py"]),
    (
        "desktop_app/flow/engine.py",
        [
            "tests/test_state_changed_in_place.py",
            "tests/test_fork_unknown_field.py",
            # a wake that times a run out publishes its end
            "tests/test_run_deadline_shown.py",
        ],
    ),
    ("desktop_app/flow/replay.py", ["tests/test_fork_unknown_field.py"]),
):
    TESTS_FOR[_module] += [t for t in _tests if t not in TESTS_FOR[_module]]
TESTS_FOR["desktop_app/flow/recovery.py"].append("tests/test_mutation_kills_recovery.py")
TESTS_FOR["desktop_app/flow/pool.py"].append("tests/test_mutation_kills_pool.py")
# a wait kind's begin and poll are reached through the waiting module's steps
TESTS_FOR["desktop_app/flow/wait_kinds.py"] += [
    "tests/test_mutation_kills_waiting.py",
    "tests/test_mutation_kills_wait_kinds.py",
]
# RunMeta's round trip and RunState read from one head
TESTS_FOR["desktop_app/flow/run.py"] += [
    "tests/test_run_state.py",
    "tests/test_mutation_kills_run.py",
]

#: modules whose tests start stdio MCP servers in the test process
REAL_STDERR = {
    "desktop_app/agent/mcp.py",
    "desktop_app/agent/runtime.py",
    "desktop_app/agent/recovery.py",
}

_RESULT = re.compile(r"^\s+(\S+): (.+)$")
_KILLED = {"killed", "timeout", "caught by type check"}
_SKIPPED = {"skipped", "not checked", "check was interrupted by user"}


def dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def copy_checkout(dest: Path) -> None:
    """The files a fresh clone has (with this checkout's edits), nothing else."""
    if dest.exists():
        shutil.rmtree(dest)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = Path(os.fsdecode(raw))
        src = ROOT / rel
        if rel.parts[0] == ".mutation" or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def configure(dest: Path, module: str) -> None:
    tests = [t for t in TESTS_FOR[module] if (dest / t).exists()]
    section = [
        "",
        "[tool.mutmut]",
        'source_paths = ["desktop_app"]',
        f'only_mutate = ["{module}"]',
        'also_copy = ["schema", "tools"]',
        f"pytest_add_cli_args_test_selection = {tests!r}".replace("'", '"'),
        # tests marked slow (the minute-long S43/S44 loads) would run for every
        # mutant they reach; the per-module selection covers those paths faster
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-m", "not slow"]',
        # mutmut stops a mutant after 15x (wall) and 30x (CPU) its tests'
        # recorded time by default: a definition mutant that loops forever
        # in compile()'s reachability walk held the only job slot for 18
        # minutes (its tests take 70 s). 5x still leaves a slow survivor
        # five times its tests' whole time, on a machine as busy as the one
        # the times were recorded on
        "timeout_multiplier = 5.0",
        "",
    ]
    if module in REAL_STDERR:
        # mutmut's output catcher swaps sys.stderr for an object with no file
        # behind it, which the MCP SDK hands a stdio server's process as its
        # stderr ("I/O operation on closed file"): the clean run fails. With
        # debug, mutmut leaves sys.stderr alone (and prints the tests' output)
        section.insert(-1, "debug = true")
    with open(dest / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write("\n".join(section))


def equivalent() -> dict[str, str]:
    out: dict[str, str] = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.partition(":")
                out[name.strip()] = reason.strip()
    return out


@dataclass
class Figures:
    """One module's result: counts by verdict, the kill rate and how it was run."""

    module: str
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    survived: int = 0
    skipped: int = 0
    seconds: float = 0.0
    finished: str = ""
    commit: str = ""
    how: str = "full run"
    survivors: list[str] = field(default_factory=list)
    #: survivors of the full run that a later ``--survivors`` run killed -> the test file
    rekilled: dict[str, str] = field(default_factory=dict)
    #: the test selection of the full run (``TESTS_FOR[module]`` then)
    tests: list[str] = field(default_factory=list)
    #: mutants listed equivalent that the tests killed: a stale name (mutmut
    #: numbers a function's mutants in order, so a changed function renumbers
    #: them); counted as killed, and the listed name should be corrected
    stale_equivalent: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Killed over killed + survived (equivalent and skipped mutants excluded), %."""
        tested = self.killed + self.survived
        return 100.0 * self.killed / tested if tested else 100.0


def _commit() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head}+edits" if dirty else head


def _postgres_available() -> bool:
    """Whether the tests will find a PostgreSQL (tests/pg_support.py's rules 1 and 2)."""
    return bool(os.environ.get("FLOWDESK_TEST_PG_DSN")) or bool(
        glob.glob("/usr/lib/postgresql/*/bin/initdb")
    )


def _env() -> dict[str, str]:
    """The environment mutmut and its tests run in.

    With a PostgreSQL at hand, ``CI=true``: the PostgreSQL tests then fail
    instead of skipping when a mutant breaks the schema or the store (they
    skip "no PostgreSQL: could not prepare the template database" otherwise,
    and such a mutant would count as a survivor)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if _postgres_available():
        env["CI"] = "true"
    return env


def _mutmut(dest: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = _env()
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args],
        cwd=dest,
        env=env,
        check=check,
        capture_output=True,
        text=True,
    )


def _run_mutmut(dest: Path, module: str, jobs: int, names: list[str]) -> None:
    env = _env()
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *names]
    run = subprocess.run(cmd, cwd=dest, env=env)
    if run.returncode != 0:
        raise SystemExit(f"mutmut run failed for {module} (exit {run.returncode}); see above")


def count(module: str, dest: Path, rekilled: dict[str, str] | None = None) -> Figures:
    """Classify every mutant of ``module`` from ``mutmut results`` (and the kills
    of later ``--survivors`` runs, ``rekilled``); write the survivors' diffs."""
    listed = _mutmut(dest, "results", "--all", "true").stdout
    prefix = dotted(module) + "."
    figures = Figures(module, rekilled=dict(rekilled or {}))
    known = equivalent()
    for line in listed.splitlines():
        m = _RESULT.match(line)
        if m is None or not m.group(1).startswith(prefix):
            continue
        name, status = m.group(1), m.group(2).strip()
        figures.mutants += 1
        if name in known and status in _KILLED:
            figures.killed += 1
            figures.stale_equivalent.append(name)
        elif name in known:
            figures.equivalent += 1
        elif status in _KILLED or name in figures.rekilled:
            figures.killed += 1
        elif status in _SKIPPED:
            figures.skipped += 1
        else:
            figures.survived += 1
            figures.survivors.append(f"{name}: {status}")
    with open(dest / "survivors.diff", "w", encoding="utf-8") as fh:
        for entry in figures.survivors:
            name = entry.partition(":")[0]
            fh.write(_mutmut(dest, "show", name, check=False).stdout + "\n")
    return figures


def _figures_path(module: str) -> Path:
    return WORK / dotted(module) / "figures.json"


def load_figures(module: str) -> Figures | None:
    path = _figures_path(module)
    if not path.exists():
        return None
    return Figures(**json.loads(path.read_text(encoding="utf-8")))


def function_patterns(module: str, functions: list[str]) -> list[str]:
    """mutmut name patterns (fnmatch) for every mutant of ``functions`` in
    ``module``: ``desktop_app.store.postgres.store.xǁ*ǁcreate_run__mutmut_*`` for a
    method of any class, ``desktop_app.store.postgres.store.x_create_run__mutmut_*``
    for a module-level function (the inverse of :func:`_function`)."""
    prefix = dotted(module)
    out: list[str] = []
    for f in functions:
        out += [f"{prefix}.xǁ*ǁ{f}__mutmut_*", f"{prefix}.x_{f}__mutmut_*"]
    return out


def run_module(module: str, jobs: int, functions: list[str] | None = None) -> Figures:
    """A full mutation run of ``module`` in a fresh copy of the checkout.

    ``functions`` (names such as ``create_run``): generate every mutant but
    run only those in these functions; the others are counted "skipped"
    (mutmut's "not checked"), never killed. This finishes a module whose full
    run was stopped for time, function by function."""
    dest = WORK / dotted(module)
    started = time.monotonic()
    commit = _commit()  # what is copied, not what HEAD is when the run ends
    copy_checkout(dest)
    configure(dest, module)
    _run_mutmut(dest, module, jobs, function_patterns(module, functions or []))
    figures = count(module, dest)
    figures.seconds = round(time.monotonic() - started, 1)
    figures.tests = list(TESTS_FOR[module])
    if functions:
        figures.how = f"full run of the mutants in {', '.join(functions)}"
    return _finish(figures, commit)


#: Selection entries whose tests live (also) in another file: the contract
#: suite runs the checks of the ``desktop_app/store/conformance/`` package.
_TESTS_ALSO_IN = {"tests/contract/": ["desktop_app/store/conformance"]}


def _changed_since(commit: str, paths: list[str]) -> bool:
    """Whether any of ``paths`` differs between ``commit`` and the working tree."""
    diff = subprocess.run(
        ["git", "diff", "--quiet", commit.removesuffix("+edits"), "--", *paths], cwd=ROOT
    )
    return diff.returncode != 0


def kill_tests(module: str, ran: list[str] | None = None, since: str = "") -> list[str]:
    """The tests that decide a ``--survivors`` run of ``module``: its
    selection's ``tests/test_mutation_kills_*.py`` files, every test added to
    its selection since the full run (``ran``: that run's selection; the full
    run already saw the others pass on each survivor), and, with ``since``
    (the commit the full run copied), every selected test file or folder
    edited since (for ``tests/contract/``: also the conformance checks)."""
    return [
        t
        for t in TESTS_FOR[module]
        if (
            t.startswith("tests/test_mutation_kills_")
            or (ran and t not in ran)
            or (since and _changed_since(since, [t, *_TESTS_ALSO_IN.get(t, [])]))
        )
        and (ROOT / t).exists()
    ]


def tests_reaching(tree: Path, base: list[str]) -> tuple[Callable[[str], list[str]], list[str]]:
    """Run the kill tests once in ``tree`` with mutmut's ``stats`` trampolines
    and ``tools/mutation_hits.py`` recording which mutated functions each test
    reaches. Return ``(select, failing)``: ``select`` maps a mutant name to the
    test ids to run against it, in file order (the tests that reach the
    mutant's function, plus every test that starts a subprocess: what a child
    reaches is not recorded; this is mutmut's own narrowing, redone for tests
    its full run did not have); ``failing`` lists the tests (or files) that
    fail or cannot be collected on the tree's unmutated code. Those test
    behaviour newer than the code the full run copied (a fix made since);
    they are never run against a mutant, since they would "kill" every one.

    Raises:
        SystemExit: the recording run wrote nothing.
    """
    out = tree / "mutation-hits.json"
    out.unlink(missing_ok=True)
    env = {**_env(), "MUTANT_UNDER_TEST": "stats", "FLOWDESK_MUTATION_HITS": str(out)}
    cmd = [x for x in base if x != "-x"] + ["-p", "tools.mutation_hits"]
    cmd.append("--continue-on-collection-errors")
    subprocess.run(cmd, cwd=tree, env=env)
    if not out.exists():
        raise SystemExit(f"recording which kill tests reach which function failed in {tree}")
    hits = json.loads(out.read_text(encoding="utf-8"))
    spawned = set(hits["subprocess"])
    reached = {t: set(fns) for t, fns in hits["tests"].items()}
    # entered at import (SQL rendered once, when the package is imported):
    # mutmut's in-process run sees no test reach these, and a fresh process
    # with the mutant switched on renders it for every test
    at_import = set(hits.get("import", []))
    failing = list(hits.get("failed", []))
    bad = set(failing)

    def select(name: str) -> list[str]:
        function = name.rsplit("__mutmut_", 1)[0]
        chosen = [
            t
            for t in hits["order"]
            if t not in bad
            and t.split("::", 1)[0] not in bad
            and (t in spawned or function in reached[t] or function in at_import)
        ]
        # the kill files first: pytest -x stops at the first failure
        return sorted(chosen, key=lambda t: not t.startswith("tests/test_mutation_kills_"))

    return select, failing


#: pytest's exit codes for "interrupted by a collection error" (2) and "a
#: conftest could not be imported" (4)
_FAILS_AT_IMPORT = (2, 4)


def _function(mutant: str) -> str:
    """The mutated function's name: ``run_child`` for
    ``desktop_app.flow.engine.xǁEngineǁrun_child__mutmut_3`` (a method),
    ``call_step`` for ``desktop_app.flow.driver.x_call_step__mutmut_4``."""
    base = mutant.rsplit("__mutmut_", 1)[0]
    if "ǁ" in base:
        return base.rpartition("ǁ")[2]
    return base.rpartition(".")[2].removeprefix("x_")


def rerun_survivors(module: str, jobs: int, functions: list[str] | None = None) -> Figures:
    """Run the kill tests against the last full run's survivors of ``module``.

    The full run already showed that every other selected test passes on each
    survivor, so only the tests added since decide: each survivor is run
    through the :func:`kill_tests` that reach its function (pytest ``-x``, the mutant
    switched on with ``MUTANT_UNDER_TEST`` as mutmut does, in the module's
    ``.mutation/<module>/mutants/`` tree with the checkout's current tests).
    Mutmut's own cache cannot do this: a changed test selection resets every
    verdict. ``jobs`` survivors run at once. Each kill is also written to
    ``.mutation/<module>/rekilled.json`` as it is found, so an interrupted
    run keeps its kills and the next one starts after them. ``functions``
    (names such as ``run_child``): re-run only the survivors in those, to
    confirm one batch of new kill tests first; the others keep their verdict.

    Raises:
        SystemExit: the module has no earlier full run to start from.
    """
    before = load_figures(module)
    dest = WORK / dotted(module)
    tree = dest / "mutants"
    if before is None or not tree.is_dir():
        raise SystemExit(f"no earlier run of {module} in {dest}; run it without --survivors")
    for folder in ("tests", "tools"):
        shutil.copytree(ROOT / folder, dest / folder, dirs_exist_ok=True)
        shutil.copytree(ROOT / folder, tree / folder, dirs_exist_ok=True)
    # test code that lives in the package (the conformance checks), unless mutated here
    for source in {f for files in _TESTS_ALSO_IN.values() for f in files}:
        for where in (dest, tree):
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, where / source, dirs_exist_ok=True)
            elif source != module:
                shutil.copy2(ROOT / source, where / source)
    known = equivalent()
    # today's survivors: a name taken off the equivalent list since the last
    # count (it named another mutant) is a survivor again and is re-run too
    current = count(module, dest, before.rekilled)
    names = [e.partition(":")[0] for e in current.survivors]
    names = [n for n in names if n not in known and n not in before.rekilled]
    files = kill_tests(module, before.tests, before.commit)
    if not files:
        raise SystemExit(
            f"no kill tests and no test edited since {before.commit} in {module}'s selection"
        )
    rekilled = dict(before.rekilled)
    # kills confirmed by an interrupted earlier --survivors run (kept as they come)
    progress = dest / "rekilled.json"
    if progress.exists():
        rekilled.update(json.loads(progress.read_text(encoding="utf-8")))
    names = [n for n in names if n not in rekilled]
    if functions:
        names = [n for n in names if _function(n) in functions]
    started = time.monotonic()
    base = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    base += ["-p", "no:randomly", "-m", "not slow", *files]
    recording = time.monotonic()
    reach, failing = tests_reaching(tree, base)
    # a mutant runs a subset of what the recording run ran: one that takes
    # far longer hangs (a deadlock, an endless loop), and is caught by its
    # timeout, as mutmut counts a timeout
    limit_s = 60 + 3 * (time.monotonic() - recording)
    if failing:
        print(
            f"  {len(failing)} kill tests fail on the code the full run copied "
            f"({before.commit}): they test behaviour added since, need a full run, "
            "and are not run against its mutants:"
        )
        for t in failing:
            print(f"    {t}")
    pending = list(names)
    running: list[tuple[str, subprocess.Popen[bytes], float]] = []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            name = pending.pop(0)
            selected = reach(name)
            if not selected:
                print(f"  survived (no kill test reaches it): {name}")
                continue
            env = {**_env(), "MUTANT_UNDER_TEST": name}
            proc = subprocess.Popen(
                [*base[: -len(files)], *selected],
                cwd=tree,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a timeout kills its workers too
            )
            running.append((name, proc, time.monotonic()))
        if not running:
            continue
        name, proc, began = running.pop(0)
        try:
            code = proc.wait(timeout=max(1.0, began + limit_s - time.monotonic()))
            verdict = "survived" if code == 0 else "killed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, verdict = 1, f"timeout (over {limit_s:.0f} s)"
        if code in _FAILS_AT_IMPORT:
            # the recording run collected these same tests with these same
            # arguments: only the mutant can make collection fail, by raising
            # when the package is imported (SQL rendered at import), so no
            # program using it starts, a kill as plain as a failing test
            code, verdict = 1, f"killed (the tests cannot be collected: pytest exit {code})"
        elif code not in (0, 1):
            verdict = f"error (pytest exit {code})"
        print(f"  {verdict}: {name}")
        if code == 1:
            rekilled[name] = ", ".join(files)
            progress.write_text(json.dumps(rekilled, indent=1) + "\n", encoding="utf-8")
    figures = count(module, dest, rekilled)
    figures.seconds = before.seconds
    figures.tests = before.tests
    which = f"the survivors in {len(functions)} functions" if functions else "survivors"
    figures.how = (
        f"full run, then {which} re-run at {_commit()} ({round(time.monotonic() - started)} s)"
    )
    return _finish(figures, before.commit)


def _finish(figures: Figures, commit: str) -> Figures:
    """Stamp ``figures`` (``commit``: the code the full run mutated) and save them."""
    figures.finished = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    figures.commit = commit
    path = _figures_path(figures.module)
    path.write_text(json.dumps(asdict(figures), indent=1) + "\n", encoding="utf-8")
    return figures


def summary_table(rows: list[Figures]) -> str:
    """The per-module table: mutants, killed, equivalent, survivors, kill rate, wall time."""
    head = ("module", "mutants", "killed", "equivalent", "survivors", "kill rate", "wall time")
    lines = [head]
    for f in rows:
        lines.append(
            (
                f.module,
                str(f.mutants),
                str(f.killed),
                str(f.equivalent),
                str(f.survived) + (f" (+{f.skipped} skipped)" if f.skipped else ""),
                f"{f.rate:.1f}%",
                f"{f.seconds / 60:.1f} min",
            )
        )
    total = Figures("all modules")
    for f in rows:
        total.mutants += f.mutants
        total.killed += f.killed
        total.equivalent += f.equivalent
        total.survived += f.survived
        total.skipped += f.skipped
        total.seconds += f.seconds
    lines.append(
        (
            total.module,
            str(total.mutants),
            str(total.killed),
            str(total.equivalent),
            str(total.survived),
            f"{total.rate:.1f}%",
            f"{total.seconds / 60:.1f} min",
        )
    )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [fmt(lines[0]), rule, *(fmt(r) for r in lines[1:-1]), rule, fmt(lines[-1])]
    out.append("")
    out.append("kill rate = killed / (killed + survivors); equivalent mutants (listed with")
    out.append("their reason in tools/mutation_equivalent.txt) and skipped ones are excluded.")
    for f in rows:
        out.append(f"{f.module}: {f.how}, {f.finished}, commit {f.commit}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", help="paths such as desktop_app/flow/retry.py")
    p.add_argument("--jobs", type=int, default=2, help="mutants run in parallel (default 2)")
    p.add_argument("--survivors", action="store_true", help="re-run only the last run's survivors")
    p.add_argument(
        "--functions",
        default="",
        help="only the mutants (with --survivors: the survivors) in these functions "
        "(comma-separated names such as create_run,_tx)",
    )
    p.add_argument(
        "--tests",
        default="",
        help="run against these test files (comma-separated) instead of the module's "
        "selection: on a machine too busy for its slowest tests; a survivor there is "
        "counted a survivor even if the full selection would kill it",
    )
    p.add_argument(
        "--summary", action="store_true", help="print the table of earlier runs; run nothing"
    )
    args = p.parse_args(argv)
    modules = args.modules or list(TESTS_FOR)
    unknown = [m for m in modules if m not in TESTS_FOR]
    if unknown:
        print(f"no test selection for {unknown}; add it to TESTS_FOR in {__file__}")
        return 2
    if args.tests:
        if len(modules) != 1:
            print("--tests takes one module")
            return 2
        TESTS_FOR[modules[0]] = [t for t in args.tests.split(",") if t]
    ran: list[Figures] = []
    if not args.summary:
        for module in modules:
            only = [f for f in args.functions.split(",") if f]
            if args.survivors:
                ran.append(rerun_survivors(module, args.jobs, only))
            else:
                ran.append(run_module(module, args.jobs, only))
    print("\nmutation kill rate per module (equivalent mutants excluded):")
    for f in ran:
        print(
            f"  {f.module}: {f.rate:.1f}% killed ({f.killed} killed, {f.survived} survived, "
            f"{f.equivalent} equivalent, {f.skipped} skipped) in {f.seconds:.0f} s"
        )
        for entry in f.survivors:
            print(f"      survivor {entry}")
        if f.survivors:
            print(f"      diffs: {WORK / dotted(f.module) / 'survivors.diff'}")
        for name in f.stale_equivalent:
            print(f"      listed equivalent but killed (a stale name? counted killed): {name}")
    rows = [f for f in (load_figures(m) for m in TESTS_FOR) if f is not None]
    if rows:
        table = summary_table(rows)
        WORK.mkdir(exist_ok=True)
        SUMMARY.write_text(table, encoding="utf-8")
        print(f"\n{table}\n(written to {SUMMARY})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
