"""The built-in ``digest`` flow: summarise every file of a folder into a report.

Steps:

1. ``scan`` lists the folder's files (sorted, relative, ``/``-separated;
   hidden files, ``.pyc`` and other binary files, symbolic links, FIFOs,
   sockets and devices are listed, and become ``skipped`` rows with the
   reason (links are never followed); a hidden folder or ``node_modules`` is
   not entered but listed once as ``name/``, skipped).
2. ``summarize`` is a loop step, one iteration per file, checkpointed each
   iteration together with the file's domain row (``digest_files``) in one
   transaction. A crash after file 600 of 1,000 resumes at file 601; a file
   whose row committed is never processed again.
3. ``report`` writes ``digest.md`` in the output folder, atomically (temp file
   then rename), mode 0600 whatever the umask, from the domain rows ordered by
   path, so a re-run of the step after a crash gives the same bytes.

Each file is opened where it is read, with no symbolic link followed on any
part of its path, ``O_NONBLOCK`` (a file that became a FIFO after the scan
cannot block) and checked to be a regular file on the open descriptor
(:func:`desktop_app.flows.confined.open_regular`); anything else is skipped
with the reason.

Titles and summaries come from :mod:`desktop_app.flows.extract`, a plain,
deterministic extractive algorithm (no model).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from desktop_app.errors import InputError
from desktop_app.flow import CompiledFlow, FlowBuilder, StepContext
from desktop_app.flows.confined import Refused, open_dir, open_regular, write_private
from desktop_app.flows.extract import READ_LIMIT_BYTES, extract, looks_binary
from desktop_app.private import make_private_dirs
from desktop_app.store.domain.digest import DigestFile, files_of_run, record_file
from desktop_app.textsafe import one_line, visible_controls
from desktop_app.words import plural

if TYPE_CHECKING:
    from desktop_app.agent.runtime import Agent

REPORT_NAME = "digest.md"
SKIP_DIRS = {"node_modules"}


class DigestInput(BaseModel):
    """What a user gives: the folder to read and where the report goes."""

    folder: str = Field(description="The folder whose files are summarised (read, never changed)")
    out: str = Field(description="The folder that receives digest.md")


class DigestState(DigestInput):
    """The run's state: the file list (set by ``scan``) and a cursor."""

    files: list[str] = []
    cursor: int = 0
    skipped: int = 0
    report_path: str | None = None


def check_input(folder: str | os.PathLike[str], out: str | os.PathLike[str]) -> DigestInput:
    """Validate the folders before a run starts, creating nothing: ``out``
    is made (0700) by the run's report step, so a start refused later (no
    database, no schema) leaves no folder behind.

    Raises:
        InputError: the folder does not exist / is not a folder, or ``out``
        exists and is not a writable folder, or cannot be created (a file
        in its path, a folder above it that cannot be written).
    """
    src = Path(folder).expanduser()
    try:
        return _check_input(src, Path(out).expanduser())
    except (OSError, RuntimeError) as exc:  # symlink loops, permissions, odd paths
        raise InputError(f"cannot use {src} -> {out}: {exc}") from exc


def _check_creatable(dst: Path) -> None:
    """Refuse ``dst`` (absent) unless the report step can create it: the
    nearest folder above it that exists must be a folder it can write in.
    Creates nothing."""
    above = dst.absolute().parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise InputError(
            f"cannot create the output folder {dst}: {above} is not a folder; choose another"
        )
    if not os.access(above, os.W_OK | os.X_OK):
        raise InputError(
            f"cannot create the output folder {dst}: {above} is not writable; choose another"
        )


def _check_input(src: Path, dst: Path) -> DigestInput:
    if not src.exists():
        raise InputError(f"folder {src} does not exist; choose an existing folder")
    if not src.is_dir():
        raise InputError(f"{src} is not a folder; choose a folder")
    if dst.exists() and not dst.is_dir():
        raise InputError(f"output {dst} exists and is not a folder; choose a folder for the report")
    if not dst.exists():
        _check_creatable(dst)
    elif not os.access(dst, os.W_OK):
        raise InputError(f"the output folder {dst} is not writable; choose another")
    if (dst / REPORT_NAME).is_dir():
        raise InputError(f"{dst / REPORT_NAME} is a folder; choose another output folder")
    return DigestInput(folder=str(src.resolve()), out=str(dst.resolve()))


def _shown(rel: str) -> str:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # a name that is not UTF-8: keep it visible, escaped
        return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return rel


def scan_folder(folder: Path) -> list[str]:
    """Relative paths of what the digest reads or reports under ``folder``, sorted.

    Regular files, plus symbolic links (to files or folders; never followed),
    special files (FIFOs, sockets, devices) and hidden files, which
    :func:`read_file` reports as skipped with the reason. A hidden folder or
    one of :data:`SKIP_DIRS` is not entered: it is listed once, as
    ``name/``, and reported as skipped too, so nothing is left out silently.
    """
    found: list[str] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        base = Path(root)
        links = [d for d in dirs if (base / d).is_symlink()]  # os.walk lists them as folders
        left_out = [d for d in dirs if d not in links and _folder_left_out(d)]
        dirs[:] = sorted(d for d in dirs if d not in links and d not in left_out)
        for name in [*files, *links]:
            found.append(_shown((base / name).relative_to(folder).as_posix()))
        for name in left_out:
            found.append(_shown((base / name).relative_to(folder).as_posix()) + "/")
    return sorted(found)


def _folder_left_out(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS


def _left_out_reason(rel: str) -> str | None:
    """Why an entry of :func:`scan_folder` is not read at all, or ``None``."""
    name = rel.rstrip("/").rsplit("/", 1)[-1]
    if rel.endswith("/"):
        what = "hidden folder" if name.startswith(".") else f"{name} folder"
        return f"{what}, not read"
    return "hidden" if name.startswith(".") else None


def _skipped(rel: str, reason: str, size: int = 0) -> tuple[DigestFile, None]:
    return DigestFile(rel, "skipped", None, None, size, reason), None


def read_file(folder: Path, rel: str) -> tuple[DigestFile, str | None]:
    """Read one file and extract its title and summary; never raises for bad
    files. Returns the row and the text read (``None`` when skipped).

    The file is opened with no link followed anywhere under ``folder``,
    non-blocking, and must be a regular file on the open descriptor; a link,
    FIFO, socket, device or folder is skipped with the reason.
    """
    left_out = _left_out_reason(rel)
    if left_out is not None:
        return _skipped(rel, left_out)
    if "\\x" in rel and not (folder / rel).exists():
        return _skipped(rel, "file name is not valid UTF-8")
    try:
        top = open_dir(folder)
    except (Refused, OSError) as exc:
        return _skipped(rel, f"unreadable: the folder cannot be opened: {exc}")
    try:
        fd, st = open_regular(top, rel)
    except Refused as exc:
        reason = str(exc)
        if "not a regular file" in reason:
            reason = f"unreadable: {reason}"
        return _skipped(rel, reason)
    except FileNotFoundError:
        return _skipped(rel, "vanished before it was read")
    except OSError as exc:
        return _skipped(rel, f"unreadable: {exc.strerror or exc}")
    finally:
        os.close(top)
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(READ_LIMIT_BYTES)
    except OSError as exc:
        return _skipped(rel, f"unreadable: {exc.strerror or exc}")
    if looks_binary(data):
        return _skipped(rel, "binary", st.st_size)
    text = data.decode("utf-8", errors="ignore")
    kind, title, summary = extract(rel, text)
    return DigestFile(rel, kind, title, summary, st.st_size), text


def process_file(folder: Path, rel: str) -> DigestFile:
    """The row of one file (see :func:`read_file`); never raises for bad files."""
    return read_file(folder, rel)[0]


def render_report(folder_name: str, rows: list[DigestFile]) -> str:
    """The Markdown report; depends only on the rows (byte-identical re-runs).

    Everything taken from the folder (names, titles, summaries, which may be
    a model's text, skip reasons) has its control characters shown as escapes
    (:func:`desktop_app.textsafe.visible_controls`): ``cat digest.md`` never
    runs an escape sequence a file held."""
    done = [r for r in rows if r.kind != "skipped"]
    skipped = [r for r in rows if r.kind == "skipped"]
    out = [f"# Digest of {one_line(folder_name)}", ""]
    out.append(f"{plural(len(rows), 'file')}: {len(done):,} summarised, {len(skipped):,} skipped.")
    out.append("")
    for r in done:
        out.append(f"## {one_line(r.path)}")
        out.append("")
        out.append(f"**{visible_controls(str(r.title))}** · {r.kind}, {r.size_bytes} bytes")
        out.append("")
        out.append(visible_controls(r.summary or ""))
        out.append("")
    if skipped:
        out.append("## Skipped files")
        out.append("")
        out.extend(
            f"- {one_line(r.path)} ({visible_controls(str(r.skip_reason))})" for r in skipped
        )
        out.append("")
    return "\n".join(out)


FileHook = Callable[[str, DigestFile], None]


Summarizer = Callable[[StepContext, str, str], str]


class NotSummarised(Exception):
    """A summarizer has no summary for a file and says why (``reason``): the
    file is reported skipped with that reason and the digest goes on."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def build_digest_flow(
    on_file: FileHook | None = None, summarizer: Summarizer | None = None
) -> CompiledFlow[DigestState]:
    """Compile the ``digest`` flow.

    Args:
        on_file: called after each file is processed, before its row commits
            (progress displays; the crash tests kill the process here).
        summarizer: model mode: ``summarizer(ctx, path, text)`` returns the
            file's summary (an agent run per file, see :func:`agent_summarizer`),
            or raises :class:`NotSummarised` (the file is reported skipped with
            the reason); without one the extractive algorithm summarises. The two modes are
            different flow versions, so a run never switches mode on resume.
    """

    def scan(state: DigestState, ctx: StepContext) -> dict[str, Any]:
        folder = Path(state.folder)
        if not folder.is_dir():
            raise InputError(f"folder {folder} does not exist any more")
        folder = folder.resolve()  # files are opened with no link followed on the way
        files = scan_folder(folder)
        ctx.progress(0, len(files))
        return {"folder": str(folder), "files": files, "cursor": 0}

    def summarize_one(state: DigestState, ctx: StepContext) -> dict[str, Any]:
        rel = state.files[state.cursor]
        row, text = read_file(Path(state.folder), rel)
        if summarizer is not None and text is not None:
            try:
                row = replace(row, summary=summarizer(ctx, rel, text))
            except NotSummarised as exc:
                row = _skipped(rel, exc.reason, row.size_bytes)[0]
        if on_file is not None:
            on_file(ctx.run_id, row)
        ctx.write(record_file(ctx.run_id, row))
        return {"cursor": state.cursor + 1, "skipped": state.skipped + (row.kind == "skipped")}

    def report(state: DigestState, ctx: StepContext) -> dict[str, Any]:
        rows = ctx.query(files_of_run(ctx.run_id))
        text = render_report(Path(state.folder).name, rows)
        out = Path(state.out)
        make_private_dirs(out)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            write_private(fd, REPORT_NAME, text, tag=ctx.run_id)
        finally:
            os.close(fd)
        return {"report_path": str(out / REPORT_NAME)}

    def compiled(version: str) -> CompiledFlow[DigestState]:
        return (
            FlowBuilder(
                "digest",
                DigestState,
                version=version,
                inputs=DigestInput,
                description="Summarise every file of a folder into one digest.md report.",
            )
            .step("scan", scan)
            .loop(
                "summarize",
                summarize_one,
                until=lambda s: s.cursor >= len(s.files),
                progress=lambda s: (s.cursor, len(s.files)),
            )
            .step("report", report)
            .chain()
            .compile()
        )

    # each mode knows the other's version: a run of the other mode is no
    # older version of this one (the app's launch report does not offer to
    # fail a `digest --model` run the CLI is executing)
    mine, other = ("1", "1-model") if summarizer is None else ("1-model", "1")
    return replace(compiled(mine), variants=frozenset({compiled(other).version}))


def model_version() -> str:
    """The fingerprinted flow version (str) runs of the model mode record
    (``digest --model``: ``1-model+<16 hex>``), known without a model."""
    (version,) = build_digest_flow().variants
    return version


def agent_summarizer(agent: Agent) -> Summarizer:
    """Model mode: one agent run per file, a child of the flow run with the id
    ``"<run_id>:<path>"``, so a crash after the model answered reuses the paid
    answer when the file is processed again. Build ``agent`` with
    ``ask_user=False``: no person answers a summary's question.

    Raises (inside the step): NotSummarised when the child run ended asking a
    question (``input_required``; the reason quotes it); AgentError when it
    ended otherwise without an answer.
    """
    from desktop_app.agent.runtime import pending_question
    from desktop_app.errors import AgentError, InputRequiredError

    def summarize(ctx: StepContext, rel: str, text: str) -> str:
        prompt = (
            f"Summarise the file {rel!r} in at most two sentences. Reply with the summary "
            f"only.\n\n{text[:8000]}"
        )
        child = f"{ctx.run_id}:{rel}"
        try:
            res = agent.ask(prompt, run_id=child, parent_run_id=ctx.run_id, context=ctx.context)
            question = res.question
        except InputRequiredError:  # a re-executed step reattaches to a child that asked
            question = pending_question(agent.store.get(child))
            res = None
        if res is None or res.status == "input_required":
            raise NotSummarised(
                f"not summarised: the model asked {question!r} instead (agent run {child})"
            )
        if res.status != "done" or res.text is None:
            why = f": {res.error}" if res.error else " with no reply text"
            raise AgentError(f"summary of {rel} ended {res.status}{why} (agent run {child})")
        return " ".join(res.text.split())

    return summarize
