"""What changed between the flow version a run started under and the current one.

The store keeps a run's version string (``"<user version>+<fingerprint>"``),
not the old flow's definition, so the change is read from what the run
itself recorded: the steps it ran or was about to run (its latest
checkpoint's step records and frontier) against the current flow's steps.

* a step the run knew that the current flow lacks is *removed*;
* a current step after the run's last known step that it never reached is
  *added* only when the run knew every step before it (otherwise the run
  simply had not got there);
* a removed step and an added step at the same position are shown as one
  *renamed* step (``old → new``);
* the current steps after the run's furthest known step are *not reached*:
  named, since they run next, but whether any of them is new cannot be
  told (a step appended to the flow looks like one the run had not got to).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlowChange:
    """The difference a person reads instead of two fingerprints."""

    old_version: str
    new_version: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    #: current steps after the run's furthest known one (new or not: unknown)
    unreached: tuple[str, ...] = ()

    def describe(self) -> str:
        """``version 1 → 2: renamed fetch → download; added notify`` (one line)."""
        if self.old_version != self.new_version:
            head = f"version {self.old_version} → {self.new_version}"
        else:
            head = f"version {self.old_version} (same name, new definition)"
        parts = [f"renamed {a} → {b}" for a, b in self.renamed]
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        if self.added:
            parts.append("added " + ", ".join(self.added))
        if self.unreached:
            if not parts:
                parts.append("no change in the steps it reached")
            which = "it is" if len(self.unreached) == 1 else "any of them is"
            parts.append(
                f"not reached yet: {', '.join(self.unreached)} (whether {which} new is not "
                "recorded)"
            )
        if not parts:
            parts.append("same steps; routes or state fields changed")
        return f"{head}: {'; '.join(parts)}"


def user_version(version: str) -> str:
    """The author's version string of ``"<user version>+<fingerprint>"``."""
    return version.rsplit("+", 1)[0]


def flow_change(
    stored_version: str,
    current_version: str,
    known_steps: Iterable[str],
    current_steps: Sequence[str],
) -> FlowChange:
    """Compare the steps a run knew (execution order) with the current flow's
    steps (definition order); see the module docstring for the rules."""
    known = list(dict.fromkeys(known_steps))
    current = list(current_steps)
    removed = [s for s in known if s not in current]
    kept = [s for s in known if s in current]
    # steps before the run's furthest kept step that it never saw were added
    last = max((current.index(s) for s in kept), default=-1)
    added = [s for s in current[: last + 1] if s not in known]
    unreached = [s for s in current[last + 1 :] if s not in known]
    renamed: list[tuple[str, str]] = []
    # a removed step where a step the run never saw now stands: a rename
    for old in list(removed):
        at = known.index(old)
        if at < len(current) and current[at] not in known:
            new = current[at]
            renamed.append((old, new))
            removed.remove(old)
            if new in added:
                added.remove(new)
            if new in unreached:
                unreached.remove(new)
    return FlowChange(
        user_version(stored_version),
        user_version(current_version),
        tuple(added),
        tuple(removed),
        tuple(renamed),
        tuple(unreached),
    )
