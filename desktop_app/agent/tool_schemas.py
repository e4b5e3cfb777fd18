"""What changed in a tool's JSON-Schema input, for deciding whether an agent
run may go on with a tool that its server now describes differently.

Only what decides which arguments are valid counts: the annotation keywords
of JSON Schema (``title``, ``description``, ``examples``, ``$comment``,
``deprecated``, ``readOnly``, ``writeOnly``; JSON Schema 2020-12, "a
vocabulary for basic meta-data annotations") are left out wherever they sit
in a schema position, never where they are a property's name. A time server
restarted in another timezone changes only descriptions; a filesystem server
that adds ``openWorldHint`` changes only annotations: neither is a change.
"""

from __future__ import annotations

from typing import Any

#: JSON Schema keywords that annotate and never restrict (JSON Schema 2020-12 §9)
ANNOTATIONS = frozenset(
    {"title", "description", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)
#: keywords whose value is an object of name → subschema
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
#: keywords whose value is one subschema, or a list of subschemas
_SUBSCHEMAS = frozenset(
    {
        "items", "additionalItems", "additionalProperties", "unevaluatedItems",
        "unevaluatedProperties", "propertyNames", "contains", "not", "if", "then", "else",
        "allOf", "anyOf", "oneOf", "prefixItems",
    }
)  # fmt: skip


def significant(schema: Any) -> Any:
    """``schema`` without its annotation keywords (recursively, in schema
    positions only); anything that is not an object or list is returned as is."""
    if isinstance(schema, list):
        return [significant(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ANNOTATIONS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: significant(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMAS:
            out[key] = significant(value)
        elif key == "required" and isinstance(value, list):
            out[key] = sorted(value, key=str)  # a set of names, whatever the order
        else:
            out[key] = value  # enum, const, default, required, type, ...: as given
    return out


def schema_changes(before: Any, after: Any, limit: int = 5) -> list[str]:
    """Where two input schemas differ in more than annotations: dotted paths
    (``properties.timezone.type``, ``required``), at most ``limit`` of them
    (then ``"…"``); ``[]`` when they accept the same arguments as written."""
    found: list[str] = []
    _diff(significant(before), significant(after), "", found)
    return found[:limit] + (["…"] if len(found) > limit else [])


def _diff(a: Any, b: Any, path: str, found: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            where = f"{path}.{key}" if path else key
            _diff(a.get(key, _MISSING), b.get(key, _MISSING), where, found)
    elif a != b:
        found.append(path or "(the whole schema)")


_MISSING = object()
