"""Deterministic title and extractive-summary extraction for the ``digest`` flow.

The algorithm is plain and deterministic (no model): Luhn-style sentence
scoring. Markup is stripped, the text is split into sentences, each word
that is not a stop word scores its frequency in the document, a sentence
scores the mean of its words, and the best :data:`SUMMARY_SENTENCES`
sentences are kept in document order (ties go to the earlier sentence). For
source code the module docstring or leading comment is summarised instead;
without one the summary lists the names the file defines. A model-backed
summary comes with the agent runtime.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import PurePosixPath

from desktop_app.words import plural

SUMMARY_SENTENCES = 2
SUMMARY_MAX_CHARS = 320
TITLE_MAX_CHARS = 100
READ_LIMIT_BYTES = 256 * 1024

MARKDOWN = {".md", ".markdown", ".mdown"}
RST = {".rst", ".rest"}
TEXT = {".txt", ".text", ""}
CODE = {
    ".py",
    ".pyi",
    ".pyw",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".hpp",
    ".cxx",
    ".rs",
    ".go",
    ".java",
    ".kt",
    ".js",
    ".mjs",
    ".cjs",
    ".ts",
    ".tsx",
    ".jsx",
    ".rb",
    ".php",
    ".sh",
    ".bash",
    ".zsh",
    ".swift",
    ".scala",
    ".cs",
    ".lua",
    ".pl",
    ".pm",
    ".r",
    ".sql",
    ".toml",
    ".yaml",
    ".yml",
    ".json",
    ".ini",
    ".cfg",
    ".html",
    ".htm",
    ".css",
    ".xml",
    ".bat",
    ".ps1",
    ".m",
    ".asm",
    ".s",
    ".hs",
    ".ml",
    ".ex",
    ".exs",
    ".erl",
    ".clj",
    ".vim",
    ".el",
    ".tcl",
    ".mk",
    ".cmake",
}
COMMENT_PREFIXES = ("#", "//", "--", ";", "%", "/*", "*", "<!--")

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "also",
        "may",
        "must",
        "shall",
        "use",
        "used",
        "using",
        "one",
        "two",
        "see",
    ]
)

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


def kind_of(path: str) -> str:
    """``markdown``, ``rst``, ``code`` or ``text`` from the file name."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in MARKDOWN:
        return "markdown"
    if suffix in RST:
        return "rst"
    if suffix in CODE:
        return "code"
    return "text"


def looks_binary(data: bytes) -> bool:
    """True for data with a NUL byte in its first 8 KiB or that is not UTF-8."""
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character cut by the read limit is not binary
        return exc.start < len(data) - 4
    return False


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _title_markdown(lines: list[str]) -> str | None:
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("#"):
            t = s.lstrip("#").strip()
            if t:
                return t
        if s and i + 1 < len(lines) and re.fullmatch(r"=+|-+", lines[i + 1].strip() or "x"):
            return s
    return None


def _title_rst(lines: list[str]) -> str | None:
    for i, line in enumerate(lines[:-1]):
        s = line.strip()
        under = lines[i + 1].strip()
        if s and under and len(under) >= len(s) and re.fullmatch(r"([=\-~^*#+`'\"])\1*", under):
            return s
    return None


def _docstring_or_comment(text: str) -> str | None:
    m = re.match(r'\s*(?:#![^\n]*\n)?(?:\s*#[^\n]*\n)*\s*[rRbBuU]?("""|\'\'\')(.*?)\1', text, re.S)
    if m and m.group(2).strip():
        return m.group(2).strip()
    comment: list[str] = []
    for line in text.splitlines()[:40]:
        s = line.strip()
        if not s:
            if comment:
                break
            continue
        if s.startswith("#!"):
            continue
        prefix = next((p for p in COMMENT_PREFIXES if s.startswith(p)), None)
        if prefix is None:
            break
        body = s[len(prefix) :].strip(" */-#!>").strip()
        if body and not re.fullmatch(r"[-=*#_~ ]+", body):
            comment.append(body)
    return " ".join(comment) or None


def _defined_names(text: str) -> list[str]:
    names = re.findall(
        r"^\s*(?:async\s+)?(?:def|class|fn|func|function|struct|interface|enum|type)\s+([A-Za-z_]\w*)",
        text,
        re.M,
    )
    seen: dict[str, None] = {}
    for n in names:
        seen.setdefault(n, None)
    return list(seen)


def _strip_markup(text: str, kind: str) -> str:
    out: list[str] = []
    in_fence = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("```") or s.startswith("~~~"):
            in_fence = not in_fence
            continue
        if in_fence or not s:
            out.append("")
            continue
        if kind == "markdown" and (s.startswith("#") or s.startswith("|") or s.startswith("<")):
            out.append("")
            continue
        if kind == "rst" and (
            re.fullmatch(r"([=\-~^*#+`'\"])\1+", s) or s.startswith("..") or s.startswith(":")
        ):
            out.append("")
            continue
        if line.startswith("    ") or line.startswith("\t"):
            out.append("")
            continue
        s = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", s)
        s = re.sub(r"[`*_]{1,3}", "", s)
        s = re.sub(r"^[-+*>]\s+|^\d+[.)]\s+", "", s)
        out.append(s)
    return "\n".join(out)


def summarize(text: str, n: int = SUMMARY_SENTENCES) -> str:
    """The ``n`` best sentences of ``text`` in document order (Luhn-style)."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    sentences: list[str] = []
    for p in paragraphs:
        sentences.extend(s.strip() for s in _SENTENCE_END.split(p) if s.strip())
    sentences = [s for s in sentences if len(_WORD.findall(s)) >= 3] or sentences
    if not sentences:
        return ""
    words = [w.lower() for w in _WORD.findall(text)]
    freq = Counter(w for w in words if w not in STOP_WORDS and len(w) > 2)
    scored: list[tuple[float, int]] = []
    for i, s in enumerate(sentences):
        ws = [w.lower() for w in _WORD.findall(s)]
        content = [w for w in ws if w in freq]
        score = sum(freq[w] for w in content) / (len(ws) + 1) if ws else 0.0
        scored.append((score, i))
    best = sorted(scored, key=lambda t: (-t[0], t[1]))[:n]
    chosen = [sentences[i] for _, i in sorted(best, key=lambda t: t[1])]
    return _clip(" ".join(chosen), SUMMARY_MAX_CHARS)


def extract(path: str, text: str) -> tuple[str, str, str]:
    """``(kind, title, summary)`` of a decoded text file at relative ``path``."""
    kind = kind_of(path)
    lines = text.splitlines()
    name = PurePosixPath(path).name
    title: str | None
    if kind == "markdown":
        title = _title_markdown(lines)
    elif kind == "rst":
        title = _title_rst(lines)
    elif kind == "code":
        doc = _docstring_or_comment(text)
        title = doc.splitlines()[0] if doc else None
    else:
        title = next((ln.strip() for ln in lines if ln.strip()), None)
    title = _clip(title, TITLE_MAX_CHARS) if title else name
    if kind == "code":
        doc = _docstring_or_comment(text)
        if doc:
            summary = summarize(doc)
        else:
            names = _defined_names(text)
            count = len(lines)
            summary = plural(count, "line") + (f"; defines {', '.join(names[:6])}" if names else "")
            if len(names) > 6:
                summary += f" and {len(names) - 6} more"
            summary += "."
    else:
        summary = summarize(_strip_markup(text, kind))
    return kind, title, summary or "(no prose to summarise)"
