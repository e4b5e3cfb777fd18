"""Encoding a pydantic state into a checkpoint and decoding it back, loudly.

The state is stored in pydantic's JSON mode, one key per field. Decoding
refuses, with :class:`~desktop_app.errors.CheckpointDecodeError` naming the
run, revision and field path:

* a stored field the model no longer has (renamed or removed),
* a model field the checkpoint lacks (a default would be silently substituted),
* a value the model now rejects.

Sets, tuples, datetimes, decimals and nested models round-trip exactly
because the model's own annotations rebuild them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from desktop_app.errors import CheckpointDecodeError, StateNotStorableError

S = TypeVar("S", bound=BaseModel)


def dump_state(state: BaseModel) -> dict[str, Any]:
    """The state as a JSON-compatible dict, one key per field."""
    return state.model_dump(mode="json")


def load_state(model: type[S], data: Mapping[str, Any], run_id: str, revision: int) -> S:
    """Rebuild ``model`` from stored ``data``.

    Raises:
        CheckpointDecodeError: see module docstring.
    """
    fields = set(model.model_fields)
    keys = set(data)
    extra = sorted(keys - fields)
    if extra:
        raise CheckpointDecodeError(
            run_id,
            revision,
            extra[0],
            f"stored field is not in {model.__name__} (renamed or removed?)",
        )
    missing = sorted(fields - keys)
    if missing:
        raise CheckpointDecodeError(
            run_id,
            revision,
            missing[0],
            f"{model.__name__} has a field the checkpoint lacks; refusing to fill in a default",
        )
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise CheckpointDecodeError(run_id, revision, path, first["msg"]) from exc


#: what encoding an unstorable value raises (pydantic, a too-deep value)
_UNSTORABLE = (PydanticSerializationError, RecursionError, TypeError, ValueError)


def encode_fields(state: BaseModel, fields: set[str], step_id: str) -> dict[str, Any]:
    """``fields`` of ``state`` in JSON mode, each checked to be storable as JSON.

    Raises:
        StateNotStorableError: a value cannot be stored; names the step and field.
    """
    try:
        return state.model_dump(mode="json", include=fields)
    except _UNSTORABLE:
        pass
    for name in sorted(fields):
        try:
            state.model_dump(mode="json", include={name})
        except _UNSTORABLE as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, RecursionError):
                reason = "it is nested too deeply"
            raise StateNotStorableError(step_id, name, reason) from None
    raise StateNotStorableError(step_id, ",".join(sorted(fields)), "it is not JSON data")


def apply_output(model: type[S], state: S, out: Any) -> S:
    """The state after a step returned ``out`` (None, dict of updates, or a state).

    Raises:
        pydantic.ValidationError: the updates do not fit the model.
        TypeError: ``out`` is of another type or names unknown fields.
    """
    if out is None:
        return state
    if isinstance(out, model):
        return out
    if isinstance(out, Mapping):
        unknown = [k for k in out if k not in model.model_fields]
        if unknown:
            raise TypeError(f"step returned unknown state field(s) {unknown} for {model.__name__}")
        # Validate only the fields that changed; the others keep their objects,
        # so StateTracker can skip re-encoding them.
        new = state.model_copy()
        validator = model.__pydantic_validator__
        for name, value in out.items():
            validator.validate_assignment(new, name, value)
        return new
    raise TypeError(
        f"a step must return None, a dict of updates or a {model.__name__}, "
        f"not {type(out).__name__}"
    )


class StateMutatedError(TypeError):
    """A step changed a state container in place instead of returning the change."""


class StateTracker:
    """Encodes successive states of one run, re-encoding only changed fields.

    A field whose object is the one seen at the last encode is not encoded
    again, so a step that changes one small field costs that field, not the
    whole state. Steps must therefore return changes rather than mutate the
    state they were given; :meth:`check_unmutated` catches the common mistake
    (a list, dict or set whose length changed in place) and fails the step.
    """

    def __init__(self, state: BaseModel) -> None:
        self._values: dict[str, Any] = {}
        self._lens: dict[str, int] = {}
        self._dumped: dict[str, Any] = {}
        self.encode(state)

    def encode(self, state: BaseModel, step_id: str = "") -> dict[str, Any]:
        """The JSON-mode dump of ``state``; a new dict whenever a field changed.

        Raises:
            StateNotStorableError: a changed field cannot be stored (naming
                ``step_id`` and the field); nothing is remembered then.
        """
        changed = {
            name
            for name in type(state).model_fields
            if name not in self._values or getattr(state, name) is not self._values[name]
        }
        if changed:
            part = encode_fields(state, changed, step_id)
            self._dumped = {**self._dumped, **part}
            for name in changed:
                value = getattr(state, name)
                self._values[name] = value
                if isinstance(value, (list, dict, set)):
                    self._lens[name] = len(value)
                else:
                    self._lens.pop(name, None)
        return self._dumped

    def check_unmutated(self, state: BaseModel, step_id: str) -> None:
        """Raise StateMutatedError if a tracked container changed size in place."""
        for name, size in self._lens.items():
            value = getattr(state, name)
            if value is self._values[name] and len(value) != size:
                raise StateMutatedError(
                    f"step {step_id!r} changed state field {name!r} in place; return the "
                    f"new value instead (for example {{{name!r}: [*state.{name}, item]}})"
                )
