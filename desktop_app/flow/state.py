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

import types
import typing
from collections.abc import Container, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from desktop_app.errors import (
    CheckpointDecodeError,
    InputError,
    PayloadNotStorableError,
    StateNotStorableError,
)
from desktop_app.store import codec
from desktop_app.store.protocol import StepRecord

S = TypeVar("S", bound=BaseModel)


#: per state model class seen (a flow's few): its field names in declaration
#: order and as a set, read once
_FIELDS: dict[type[BaseModel], tuple[tuple[str, ...], frozenset[str]]] = {}


def _fields(model: type[BaseModel]) -> tuple[tuple[str, ...], frozenset[str]]:
    """``model``'s field names, read once per model class: pydantic's
    ``model_fields`` builds them at every access, a cost the step path paid
    several times per step."""
    known = _FIELDS.get(model)
    if known is None:
        order = tuple(model.model_fields)
        known = _FIELDS[model] = (order, frozenset(order))
    return known


#: per state model class seen: its ``__pydantic_serializer__`` when the class
#: keeps pydantic's own ``model_dump`` (which calls that serializer's
#: ``to_python`` with these arguments and the defaults for the others), else
#: ``None`` (a model overriding ``model_dump`` is dumped through it)
_SERIALIZERS: dict[type[BaseModel], Any] = {}


def _serializer(model: type[BaseModel]) -> Any:
    """What dumps ``model``'s instances without ``model_dump``'s Python
    wrapper (~1 us of its keyword arguments at every step), or ``None``."""
    try:
        return _SERIALIZERS[model]
    except KeyError:
        own = model.model_dump is BaseModel.model_dump
        ser = _SERIALIZERS[model] = model.__pydantic_serializer__ if own else None
        return ser


def dump_state(state: BaseModel) -> dict[str, Any]:
    """The state as a JSON-compatible dict, one key per field (its
    ``model_dump(mode="json")``)."""
    ser = _serializer(type(state))
    if ser is None:
        return state.model_dump(mode="json")
    out: dict[str, Any] = ser.to_python(state, mode="json")
    return out


def load_state(model: type[S], data: Mapping[str, Any], run_id: str, revision: int) -> S:
    """Rebuild ``model`` from stored ``data``.

    Raises:
        CheckpointDecodeError: see module docstring.
    """
    fields = _fields(model)[1]  # read once per model class (model_fields builds a dict)
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
        raise CheckpointDecodeError(run_id, revision, path, first["msg"], mendable=True) from exc


#: what to do when a run's state does not fit the model it is moved onto
_MOVING = (
    "change the field in the current model to a type its stored value fits (or give it a "
    "validator that converts it), or keep the run for its flow's earlier code"
)


def upgraded_state(
    model: type[S], data: Mapping[str, Any], run_id: str, revision: int
) -> tuple[S, dict[str, Any], list[str]]:
    """A run's stored state ``data`` moved onto ``model``, a newer state
    model of its flow (``resume --onto-current``, asked for by a person):
    a field ``model`` added is given its default, a field it no longer has
    is left out (the old run's checkpoints keep it). Returns the state, the
    fields given their defaults (``{name: default}``) and the fields left
    out (sorted).

    Raises:
        CheckpointDecodeError: a field ``model`` added has no default (what
            to do: give it one), or a stored value no longer fits its field.
    """
    fields = model.model_fields
    added = sorted(set(fields) - set(data))
    required = [name for name in added if fields[name].is_required()]
    if required:
        raise CheckpointDecodeError(
            run_id,
            revision,
            required[0],
            f"{model.__name__} has a field the run's state lacks and gives it no default",
            advice="give the field a default in the model to move the run onto it, or keep "
            "the run for its flow's earlier code",
        )
    defaults = {name: fields[name].get_default(call_default_factory=True) for name in added}
    dropped = sorted(set(data) - set(fields))
    kept = {k: v for k, v in data.items() if k in fields}
    try:
        state = load_state(model, {**kept, **defaults}, run_id, revision)
    except CheckpointDecodeError as exc:  # a replay or a fork stays on the old version
        raise CheckpointDecodeError(
            run_id, revision, exc.field_path, exc.reason, advice=_MOVING
        ) from exc
    return state, defaults, dropped


#: what encoding an unstorable value raises (pydantic, a too-deep value)
_UNSTORABLE = (PydanticSerializationError, RecursionError, TypeError, ValueError)


def refuse_unknown_fields(model: type[BaseModel], data: Any, where: str = "") -> None:
    """Refuse a run's input ``data`` (a mapping) that names a key which is
    neither a field nor an alias of ``model``: pydantic drops such a key
    without a word (its default ``extra="ignore"``), so a misspelt input
    would start the run with the field's default (a stored state holds
    its model's fields only, so extra keys are refused whatever the
    model's ``extra`` says). The same inside the value of a field typed
    as a model (or an optional one, or a list, tuple, set or dict of
    them) given as a mapping, unless that nested model keeps extra keys
    (``extra="allow"``: they are stored with it). ``where``: the path of
    ``data`` in the input (``"address."``), named by the message
    (``Address, at 'address', has no field 'zip_cod' ...``).

    Raises:
        InputError: naming the unknown keys (with their path), the nearest
            field and the model's fields; nothing was created.
    """
    import difflib

    if not isinstance(data, Mapping):
        return
    fields = model.model_fields
    by_key: dict[Any, Any] = {}
    for name, info in fields.items():
        by_key[name] = info
        by_key.update((a, info) for a in (info.alias, info.validation_alias) if isinstance(a, str))
    unknown = [str(k) for k in data if k not in by_key]
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(fields), n=1)
        at = f", at {where[:-1]!r}," if where else ""  # a nested model: where it is
        raise InputError(
            f"{model.__name__}{at} has no field {', '.join(repr(k) for k in unknown)}"
            + (f" (did you mean {near[0]!r}?)" if near else "")
            + f"; its fields: {', '.join(fields) or 'none'}. Nothing was created."
        )
    for key, value in data.items():
        for nested, part, path in _nested_inputs(by_key[key].annotation, value, f"{where}{key}"):
            if nested.model_config.get("extra") != "allow":
                refuse_unknown_fields(nested, part, f"{path}.")


def _nested_inputs(
    annotation: Any, value: Any, path: str
) -> Iterator[tuple[type[BaseModel], Any, str]]:
    """The parts of input ``value`` (for a field annotated ``annotation``,
    at ``path``) that pydantic validates into a model: ``(model, part,
    its path)``. A union with more than one model is left to pydantic (which
    of them a part becomes is its choice)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, value, path
        return
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        yield from _nested_inputs(args[0], value, path)
    elif origin in (typing.Union, types.UnionType):
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(models) == 1:
            yield from _nested_inputs(models[0], value, path)
    elif origin in (list, tuple, set, frozenset) and isinstance(value, (list, tuple)) and args:
        fixed = origin is tuple and args[-1] is not Ellipsis  # tuple[A, B], not tuple[A, ...]
        for i, item in enumerate(value[: len(args)] if fixed else value):
            yield from _nested_inputs(args[i] if fixed else args[0], item, f"{path}[{i}]")
    elif origin is dict and len(args) == 2 and isinstance(value, Mapping):
        for k, item in value.items():
            yield from _nested_inputs(args[1], item, f"{path}[{k!r}]")


def encode_fields(state: BaseModel, fields: set[str], step_id: str) -> dict[str, Any]:
    """``fields`` of ``state`` in JSON mode, each checked to be storable as JSON.

    Raises:
        StateNotStorableError: a value cannot be stored; names the step and field.
    """
    try:
        ser = _SERIALIZERS.get(type(state)) or _serializer(type(state))
        if ser is None:
            return state.model_dump(mode="json", include=fields)
        out: dict[str, Any] = ser.to_python(state, mode="json", include=fields)
        return out
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


def check_storable(value: Any, what: str) -> None:
    """Refuse ``value`` (a signal's or event's payload, an answer) unless a
    checkpoint can hold it: serialized as a state field is (pydantic's JSON
    mode, which refuses more than about 250 levels of nesting), written as
    UTF-8 JSON text and read back.

    Raises:
        PayloadNotStorableError: it cannot be stored; names ``what`` and why.
    """
    try:
        codec.loads(codec.dumps(to_jsonable_python(value)).encode("utf-8"))
    except _UNSTORABLE as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, RecursionError):
            reason = "it is nested too deeply"
        raise PayloadNotStorableError(what, reason) from None


#: pydantic's shallow copy, which :func:`copy_model` makes without it
_BASE_COPY = BaseModel.__copy__
_set_slot = object.__setattr__


def copy_model(state: S) -> S:
    """``state.__copy__()``, pydantic's shallow copy (what ``model_copy()``
    makes): a new instance with copies of its field dict, its extra fields
    and its set fields, and no private values. Made here, the same slots
    set the same way, without ``copy.copy``'s dispatch for each of the three
    (~1 us at every step); a model overriding ``__copy__``, or holding
    private attribute values, is copied by its own ``__copy__``."""
    cls = type(state)
    if cls.__copy__ is not _BASE_COPY or getattr(state, "__pydantic_private__", None) is not None:
        return state.__copy__()
    new = cls.__new__(cls)
    _set_slot(new, "__dict__", state.__dict__.copy())
    extra = state.__pydantic_extra__
    _set_slot(new, "__pydantic_extra__", None if extra is None else extra.copy())
    _set_slot(new, "__pydantic_fields_set__", state.__pydantic_fields_set__.copy())
    _set_slot(new, "__pydantic_private__", None)
    return new


def apply_output(model: type[S], state: S, out: Any) -> S:
    """The state after a step returned ``out`` (None, dict of updates, or a state).

    Raises:
        pydantic.ValidationError: the updates do not fit the model.
        TypeError: ``out`` is of another type or names unknown fields.
    """
    if out is None:
        return state
    # a dict first: what steps return, and no metaclass or ABC check for it
    if type(out) is not dict:
        if isinstance(out, model):
            return out
        if not isinstance(out, Mapping):
            raise TypeError(
                f"a step must return None, a dict of updates or a {model.__name__}, "
                f"not {type(out).__name__}"
            )
    known = _FIELDS.get(model)
    fields = (known if known is not None else _fields(model))[1]
    if not fields.issuperset(out):
        unknown = [k for k in out if k not in fields]
        raise TypeError(f"step returned unknown state field(s) {unknown} for {model.__name__}")
    # Validate only the fields that changed; the others keep their objects,
    # so StateTracker can skip re-encoding them.
    new = copy_model(state)  # what model_copy() does, without its wrappers
    validator = model.__pydantic_validator__
    for name, value in out.items():
        validator.validate_assignment(new, name, value)
    return new


class StateMutatedError(TypeError):
    """A step changed a state container in place instead of returning the change."""


class StateTracker:
    """Encodes successive states of one run, re-encoding only changed fields.

    A field whose object is the one seen at the last encode is not encoded
    again, so a step that changes one small field costs that field, not the
    whole state. Steps must therefore return changes rather than mutate the
    state they were given; :meth:`check_unmutated` catches the common mistake
    (a list, dict or set whose length changed in place) and fails the step.
    ``strict`` (``Engine(check_state=True)``) catches every change in place:
    each field a step did not replace is encoded again and compared with its
    stored encoding, at a cost that grows with the state (for tests).
    """

    def __init__(self, state: BaseModel, *, strict: bool = False) -> None:
        self.strict = strict
        self._values: dict[str, Any] = {}
        self._lens: dict[str, int] = {}
        #: the JSON-mode dump of the state last encoded: a new dict at every
        #: change, never changed in place (a checkpoint may hold it)
        self.dumped: dict[str, Any] = {}
        #: fields encoded again since :meth:`stored` (all of them at first):
        #: the only ones that can differ from the last stored checkpoint
        self.dirty: set[str] = set()
        self.encode(state)

    def encode(
        self, state: BaseModel, step_id: str = "", returned: Iterable[str] = ()
    ) -> dict[str, Any]:
        """The JSON-mode dump of ``state``; a new dict whenever a field changed.
        ``returned``: fields a step returned, encoded again even when they
        hold the object seen before (a value validation kept as it was given:
        a container the step changed in place and returned).

        Raises:
            StateNotStorableError: a changed field cannot be stored (naming
                ``step_id`` and the field); nothing is remembered then.
        """
        values = self._values
        known = _FIELDS.get(type(state))
        changed: set[str] | None = None
        # a loop, not a comprehension (a call of its own): it runs twice a step
        for name in (known if known is not None else _fields(type(state)))[0]:
            if name not in values or getattr(state, name) is not values[name]:
                if changed is None:
                    changed = set()
                changed.add(name)
        for name in returned:  # a step's few keys, not the state's fields
            if changed is None:
                changed = set()
            changed.add(name)
        if changed is not None:
            part = encode_fields(state, changed, step_id)
            self.dumped = {**self.dumped, **part}
            self.dirty |= changed
            for name in changed:
                value = getattr(state, name)
                self._values[name] = value
                if isinstance(value, (list, dict, set)):
                    self._lens[name] = len(value)
                else:
                    self._lens.pop(name, None)
        return self.dumped

    def stored(self, fields: frozenset[str]) -> None:
        """A checkpoint holding the encoding of ``fields`` was stored."""
        self.dirty -= fields

    def check_unmutated(
        self, state: BaseModel, step_id: str, returned: Container[str] = ()
    ) -> None:
        """Raise StateMutatedError if a tracked container changed size in
        place, or (``strict``) if any field the step did not replace no
        longer encodes as it was stored. ``returned``: the fields the step
        returned (a dict's keys): changed in place or not, their returned
        value is validated and stored, so they are not checked."""
        for name, size in self._lens.items():
            value = getattr(state, name)
            if value is self._values[name] and len(value) != size and name not in returned:
                raise StateMutatedError(
                    f"step {step_id!r} changed state field {name!r} in place; return the "
                    f"new value instead (for example {{{name!r}: [*state.{name}, item]}})"
                )
        if not self.strict:
            return
        for name, value in self._values.items():
            if (
                name not in returned
                and getattr(state, name) is value
                and encode_fields(state, {name}, step_id)[name] != self.dumped[name]
            ):
                raise StateMutatedError(
                    f"step {step_id!r} changed state field {name!r} in place (its size, if "
                    "any, stayed the same): such a change is not stored, so the steps after "
                    "it would see it only until the run is resumed; return the new value "
                    f"instead (for example {{{name!r}: new_value}})"
                )


class LayeredSteps(Mapping[str, StepRecord]):
    """An immutable mapping of step records: shared, never-mutated dicts
    laid one over the other (``levels``, oldest first; a key's newest level
    wins). Iterates like the one dict it stands for: the oldest level's
    order, then each newer level's new keys.

    Every dict is owned by this object (or shared with other snapshots and
    the :class:`StepRecords` that made it) and never mutated after it is
    made, so a checkpoint may hold it while the driver moves on.
    """

    __slots__ = ("_len", "_levels")

    def __init__(self, *levels: dict[str, StepRecord]) -> None:
        self._levels = levels
        self._len: int | None = None  # counted when asked: a save never asks

    def __getitem__(self, key: str) -> StepRecord:
        for level in reversed(self._levels):
            rec = level.get(key)
            if rec is not None:
                return rec
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return any(key in level for level in self._levels)

    def __iter__(self) -> Iterator[str]:
        levels = self._levels
        for i, level in enumerate(levels):
            if i == 0:
                yield from level
                continue
            older = levels[:i]
            for k in level:
                if not any(k in o for o in older):
                    yield k

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len


class StepRecords(MutableMapping[str, StepRecord]):
    """The driver's working step records: reads and writes like a dict, and
    knows which records changed since the last :meth:`snapshot` was stored.

    :meth:`snapshot` copies only the records changed since the last
    ``flatten_every`` changes (the top level), never all of them: full top
    levels are kept as shared immutable levels, merged pairwise like a
    binary counter (a level is merged into the one below once it holds half
    as many records), so each record is copied O(log n) times over a run of
    n distinct step ids, at most ~log2(n / 64) levels are read on a lookup,
    and a step's cost does not grow in proportion to the steps the run took.
    """

    flatten_every = 64

    def __init__(self, records: Mapping[str, StepRecord]) -> None:
        if isinstance(records, LayeredSteps):  # a stored snapshot: its levels are shared
            self._levels: list[dict[str, StepRecord]] = [lv for lv in records._levels if lv]
        else:
            self._levels = [dict(records)] if records else []
        self._top: dict[str, StepRecord] = {}
        #: ids written since the last stored snapshot
        self.dirty: set[str] = set()

    def __getitem__(self, key: str) -> StepRecord:
        rec = self._top.get(key)
        if rec is not None:
            return rec
        for level in reversed(self._levels):
            rec = level.get(key)
            if rec is not None:
                return rec
        raise KeyError(key)

    def __setitem__(self, key: str, value: StepRecord) -> None:
        self._top[key] = value
        self.dirty.add(key)

    def __delitem__(self, key: str) -> None:
        raise TypeError("step records are never deleted from a run")

    def __contains__(self, key: object) -> bool:
        if key in self._top:
            return True
        # a loop, not ``any`` over a generator: asked at every step's completion
        for level in self._levels:  # noqa: SIM110
            if key in level:
                return True
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(LayeredSteps(*self._levels, self._top))

    def __len__(self) -> int:
        return len(LayeredSteps(*self._levels, self._top))

    def snapshot(self) -> tuple[Mapping[str, StepRecord], frozenset[str]]:
        """An immutable copy for a checkpoint, and the ids changed since the
        last :meth:`stored` (what the store is told changed)."""
        changed = frozenset(self.dirty)
        if len(self._top) >= self.flatten_every:
            levels = self._levels
            levels.append(self._top)  # handed over: never written again
            self._top = {}
            while len(levels) > 1 and 2 * len(levels[-1]) >= len(levels[-2]):
                newer = levels.pop()
                levels[-1] = {**levels[-1], **newer}
        if not self._top:
            return LayeredSteps(*self._levels), changed
        return LayeredSteps(*self._levels, dict(self._top)), changed

    def stored(self, changed: frozenset[str]) -> None:
        """The snapshot holding ``changed`` was stored: forget them as dirty."""
        self.dirty -= changed
