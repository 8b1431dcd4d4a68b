"""Deterministic JSON Schema instances: the offline model's value generator.

`synthesize(schema)` returns a small instance of a JSON Schema (as pydantic
writes them) with no randomness and no clock, so the same schema always gives
the same value. Keywords are tried in this order:

- `const`, then `enum[0]`, then `default`;
- `$ref` (local JSON pointers, `$defs` / `definitions`) and `allOf` (merged);
- `anyOf` / `oneOf`: the first branch that is not `null` (`Optional[int]` gives
  `0`), but the `null` branch when recursion has to stop;
- objects: every property (required ones generated, optional ones take their
  `default` or are generated), dicts one entry (or `minProperties`);
- arrays: `prefixItems`, then `max(minItems, 1)` items capped by `maxItems`;
  item `i` is generated as variant `i` so `uniqueItems` holds;
- strings: a `format` table, then `pattern` (built from the standard library's
  regex parser: first branch, fewest repeats, first character of each class,
  re-checked with `re.search`), then the property name made readable and
  fitted to `minLength` / `maxLength` (`{"home_city": "home city"}`);
- numbers: `0` moved into the bounds (exclusive ones too) and onto `multipleOf`.

Recursion: expanding a `$ref` that is already being expanded switches to
*minimal* mode (required properties only, `minItems` items, `null` branches),
and a hard depth cap ends schemas that can never be satisfied.

The generator is best effort and never raises: the caller validates the
result with the real pydantic model and reports what did not fit.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from re import _constants as sre
from re import _parser as sre_parse
from typing import Any

JSONDict = dict[str, Any]

#: Past this nesting depth everything is generated minimally.
_SOFT_DEPTH = 12
#: Past this depth the generator gives up (`None`): only unsatisfiable
#: recursive schemas (a required, non-nullable self reference) get here.
_HARD_DEPTH = 48

_NUMERIC_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KEYS = ("pattern", "format", "minLength", "maxLength")


def _uuid(version: int) -> Callable[[int], str]:
    return lambda v: f"00000000-0000-{version}000-8000-{v:012x}"


#: `format` → value for variant `v` (distinct per variant where the format allows).
_FORMATS: dict[str, Callable[[int], str]] = {
    "date-time": lambda v: f"2000-01-{1 + v % 28:02d}T00:00:00Z",
    "date": lambda v: f"2000-01-{1 + v % 28:02d}",
    "time": lambda v: f"00:{v % 60:02d}:00",
    "duration": lambda v: f"PT{v}S",
    "email": lambda v: f"user{v or ''}@example.com",
    "idn-email": lambda v: f"user{v or ''}@example.com",
    "uri": lambda v: f"https://example.com/{v or ''}",
    "iri": lambda v: f"https://example.com/{v or ''}",
    "uri-reference": lambda v: f"https://example.com/{v or ''}",
    "uuid": _uuid(4),
    "uuid1": _uuid(1),
    "uuid3": _uuid(3),
    "uuid4": _uuid(4),
    "uuid5": _uuid(5),
    "ipv4": lambda v: f"192.0.2.{1 + v % 254}",
    "ipv6": lambda v: f"2001:db8::{1 + v:x}",
    "ipvanyaddress": lambda v: f"192.0.2.{1 + v % 254}",
    "ipv4network": lambda v: f"192.0.{2 + v % 250}.0/24",
    "ipv6network": lambda v: f"2001:db8:{v:x}::/48",
    "ipvanynetwork": lambda v: f"192.0.{2 + v % 250}.0/24",
    "ipv4interface": lambda v: f"192.0.2.{1 + v % 254}/24",
    "ipv6interface": lambda v: f"2001:db8::{1 + v:x}/64",
    "ipvanyinterface": lambda v: f"192.0.2.{1 + v % 254}/24",
    "hostname": lambda v: f"host{v or ''}.example.com",
    "directory-path": lambda v: ".",
}

#: Characters tried, in order, when a regex class or category needs a member.
_POOL = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "_-. @:/+=,;!?#$%&*()[]{}<>'\"~^|\\\t\n"
)
_CATEGORY_ESCAPES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def synthesize(schema: Mapping[str, Any] | bool, *, name: str = "") -> Any:
    """Return a deterministic instance of a JSON Schema (best effort; validate it).

    Args:
        schema: The JSON Schema; `$ref`s resolve against this root.
        name: Used as the text of strings that have no format or pattern.
    """
    root = dict(schema) if isinstance(schema, Mapping) else {}
    return _Generator(root).value(schema, _Where(name=name))


@dataclass(frozen=True, slots=True)
class _Where:
    """Where in the instance the generator is, and how generous it may be."""

    name: str
    variant: int = 0
    depth: int = 0
    minimal: bool = False
    refs: frozenset[str] = frozenset()

    def child(self, name: str | None = None, variant: int | None = None) -> _Where:
        depth = self.depth + 1
        return replace(
            self,
            name=self.name if name is None else name,
            variant=self.variant if variant is None else variant,
            depth=depth,
            minimal=self.minimal or depth > _SOFT_DEPTH,
        )


class _Generator:
    def __init__(self, root: JSONDict) -> None:
        self._root = root

    def value(self, schema: Any, where: _Where) -> Any:
        if where.depth > _HARD_DEPTH:
            return None
        if not isinstance(schema, Mapping):
            # `true` (anything) gets readable text; `false` has no instance at all.
            return _readable(where) if schema is not False else None
        # Copies, so a caller editing the instance never edits the schema.
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if schema.get("enum"):
            options = schema["enum"]
            return copy.deepcopy(options[where.variant % len(options)])
        if "default" in schema and where.variant == 0:
            return copy.deepcopy(schema["default"])
        if "$ref" in schema:
            return self._ref(schema, where)
        if "allOf" in schema:
            return self.value(self._merge_all(schema), where)
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                rest = {k: v for k, v in schema.items() if k != key}
                return self.value({**rest, **self._branch(schema[key], where)}, where)
        return self._typed(schema, _type_of(schema, where.minimal), where)

    def _ref(self, schema: Mapping[str, Any], where: _Where) -> Any:
        ref = schema["$ref"]
        target = self._resolve(ref)
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        if ref in where.refs:
            where = replace(where, minimal=True)
        return self.value({**target, **siblings}, replace(where, refs=where.refs | {ref}))

    def _resolve(self, ref: str) -> JSONDict:
        if not ref.startswith("#"):
            return {}
        node: Any = self._root
        for token in ref[1:].split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or token not in node:
                return {}
            node = node[token]
        return dict(node) if isinstance(node, Mapping) else {}

    def _merge_all(self, schema: Mapping[str, Any]) -> JSONDict:
        merged: JSONDict = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            if not isinstance(part, Mapping):
                continue
            if "$ref" in part:
                part = {
                    **self._resolve(part["$ref"]),
                    **{k: v for k, v in part.items() if k != "$ref"},
                }
            properties = {**merged.get("properties", {}), **part.get("properties", {})}
            required = list(dict.fromkeys([*merged.get("required", []), *part.get("required", [])]))
            merged.update(part)
            if properties:
                merged["properties"] = properties
            if required:
                merged["required"] = required
        return merged

    def _branch(self, branches: list[Any], where: _Where) -> JSONDict:
        dicts = [b if isinstance(b, Mapping) else {} for b in branches]
        nulls = [b for b in dicts if b.get("type") == "null"]
        others = [b for b in dicts if b.get("type") != "null"]
        if where.minimal and nulls:
            return dict(nulls[0])
        return dict(others[0] if others else dicts[0])

    def _typed(self, schema: Mapping[str, Any], kind: str, where: _Where) -> Any:
        if kind == "object":
            return self._object(schema, where)
        if kind == "array":
            return self._array(schema, where)
        if kind == "string":
            return self._string(schema, where)
        if kind == "integer":
            return _integer(schema, where.variant)
        if kind == "number":
            return _number(schema, where.variant)
        if kind == "boolean":
            return where.variant % 2 == 1
        if kind == "null":
            return None
        return _readable(where)

    def _object(self, schema: Mapping[str, Any], where: _Where) -> JSONDict:
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        out: JSONDict = {}
        for key, sub in properties.items():
            if key in required or not where.minimal:
                out[key] = self.value(sub, where.child(name=key))
        extra = schema.get("additionalProperties", schema.get("unevaluatedProperties", True))
        if extra is False:
            return out
        wanted = schema.get("minProperties", 0)
        if not properties and isinstance(extra, Mapping) and not where.minimal:
            wanted = max(wanted, 1)
        wanted = min(wanted, schema.get("maxProperties", wanted))
        keys = schema.get("propertyNames", {"type": "string"})
        index = 0
        while len(out) < wanted and index < wanted + len(properties) + 1:
            key = self.value(keys, _Where(name="key", variant=index))
            index += 1
            if isinstance(key, str) and key not in out:
                out[key] = self.value(extra, where.child(name=key, variant=0))
        return out

    def _array(self, schema: Mapping[str, Any], where: _Where) -> list[Any]:
        prefix: list[Any] = schema.get("prefixItems", [])
        items = schema.get("items", True)
        count = max(schema.get("minItems", 0), 0 if where.minimal else 1)
        if not where.minimal:
            count = max(count, len(prefix))
        if items is False:
            count = min(count, len(prefix))
        if "maxItems" in schema:
            count = min(count, schema["maxItems"])
        return [
            self.value(prefix[i] if i < len(prefix) else items, where.child(variant=i))
            for i in range(count)
        ]

    def _string(self, schema: Mapping[str, Any], where: _Where) -> str:
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        media = schema.get("contentMediaType")
        if media == "application/json" and "contentSchema" in schema:
            return json.dumps(self.value(schema["contentSchema"], where.child()))
        fmt = schema.get("format")
        if fmt in _FORMATS:
            text = _FORMATS[fmt](where.variant)
            if _fits(text, low, high):
                return text
        if "pattern" in schema:
            matched = _from_pattern(schema["pattern"], low, high, where.variant)
            if matched is not None:
                return matched
        text = _readable(where).ljust(low, "x")
        return text if high is None else text[:high]


def _type_of(schema: Mapping[str, Any], minimal: bool) -> str:
    """The JSON type to generate, stated or inferred from the keywords present."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return declared
    if isinstance(declared, list) and declared:
        if minimal and "null" in declared:
            return "null"
        return next((t for t in declared if t != "null"), "null")
    if any(k in schema for k in ("properties", "additionalProperties", "required")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    if any(k in schema for k in _STRING_KEYS):
        return "string"
    if any(k in schema for k in _NUMERIC_KEYS):
        return "number"
    return "any"


def _readable(where: _Where) -> str:
    """Text made from the property name: `home_city` → `home city`, then `home city 2`."""
    base = where.name.replace("_", " ").strip() or "text"
    return base if where.variant == 0 else f"{base} {where.variant + 1}"


def _fits(text: str, low: int, high: int | None) -> bool:
    return len(text) >= low and (high is None or len(text) <= high)


# --------------------------------------------------------------------------- numbers


def _integer(schema: Mapping[str, Any], variant: int) -> int:
    low = _bound(schema, "minimum", "exclusiveMinimum", math.ceil, +1)
    high = _bound(schema, "maximum", "exclusiveMaximum", math.floor, -1)
    step = schema.get("multipleOf")
    step = int(step) if isinstance(step, int | float) and step >= 1 and step == int(step) else 1
    start = _clamp(0, low, high)
    base = math.ceil(start / step) * step
    if high is not None and base > high:
        base = math.floor(start / step) * step
    for candidate in (base + variant * step, base - variant * step, base):
        if (low is None or candidate >= low) and (high is None or candidate <= high):
            return int(candidate)
    return int(base)


def _bound(
    schema: Mapping[str, Any],
    inclusive: str,
    exclusive: str,
    round_in: Callable[[float], int],
    nudge: int,
) -> int | None:
    """An inclusive integer bound from an inclusive and/or exclusive keyword."""
    bounds: list[int] = []
    if isinstance(schema.get(inclusive), int | float):
        bounds.append(round_in(schema[inclusive]))
    if isinstance(schema.get(exclusive), int | float):
        edge = schema[exclusive]
        bounds.append(int(edge) + nudge if edge == int(edge) else round_in(edge))
    if not bounds:
        return None
    return max(bounds) if nudge > 0 else min(bounds)


def _clamp(value: float, low: float | None, high: float | None) -> float:
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    return value


def _number(schema: Mapping[str, Any], variant: int) -> float:
    low, low_open = _float_bound(schema, "minimum", "exclusiveMinimum", max)
    high, high_open = _float_bound(schema, "maximum", "exclusiveMaximum", min)

    def inside(x: float) -> bool:
        above = low is None or x > low or (x == low and not low_open)
        below = high is None or x < high or (x == high and not high_open)
        return above and below

    base = 0.0
    if not inside(base):
        if low is not None and base <= low:
            base = low + 1 if low_open else low
        else:
            assert high is not None
            base = high - 1 if high_open else high
        if not inside(base) and low is not None and high is not None:
            base = (low + high) / 2
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and step > 0:
        k = math.ceil(base / step)
        candidates = [(k + j) * step for j in (variant, variant + 1, -variant - 1)]
    else:
        # Whole steps read best; inside a narrow open interval, move part way to the edge.
        nearer = base if high is None else base + (high - base) * variant / (variant + 1)
        candidates = [base + variant, base - variant, nearer]
    return float(next((c for c in candidates if inside(c)), base))


def _float_bound(
    schema: Mapping[str, Any], inclusive: str, exclusive: str, tighter: Callable[..., float]
) -> tuple[float | None, bool]:
    """The tightest bound and whether it is exclusive."""
    found: list[tuple[float, bool]] = [
        (float(schema[key]), is_open)
        for key, is_open in ((inclusive, False), (exclusive, True))
        if isinstance(schema.get(key), int | float)
    ]
    if not found:
        return None, False
    edge = tighter(value for value, _ in found)
    return edge, any(value == edge and is_open for value, is_open in found)


# --------------------------------------------------------------------------- patterns


@functools.lru_cache(maxsize=512)  # schemas repeat on every call; the search is the slow part
def _from_pattern(pattern: str, low: int, high: int | None, variant: int) -> str | None:
    """A short string `re.search`-matching `pattern` within the length bounds, if found."""
    try:
        parsed = sre_parse.parse(pattern)
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    # More repeats make longer strings: enough to reach `minLength`, and one per
    # variant so items of a unique array differ where the pattern allows it.
    for extra in range(variant, variant + low + 2):
        text = _emit(list(parsed), extra, {})
        if compiled.search(text) and _fits(text, low, high):
            return text
        if high is not None and len(text) > high:
            break
    return None


def _emit(items: list[tuple[Any, Any]], extra: int, groups: dict[int, str]) -> str:
    out: list[str] = []
    for op, arg in items:
        if op is sre.LITERAL:
            out.append(chr(arg))
        elif op is sre.NOT_LITERAL:
            out.append(_pick(functools.partial(_not_literal, arg)))
        elif op is sre.ANY:
            out.append("a")
        elif op is sre.IN:
            out.append(_pick(functools.partial(_in_class, arg)))
        elif op in _REPEATS:
            least, most, sub = arg
            count = least + extra if most is sre.MAXREPEAT else min(least + extra, most)
            out.append("".join(_emit(list(sub), extra, groups) for _ in range(count)))
        elif op is sre.SUBPATTERN:
            group, _, _, sub = arg
            text = _emit(list(sub), extra, groups)
            if group is not None:
                groups[group] = text
            out.append(text)
        elif op is sre.ATOMIC_GROUP:
            out.append(_emit(list(arg), extra, groups))
        elif op is sre.BRANCH:
            out.append(_emit(list(arg[1][0]), extra, groups))
        elif op is sre.GROUPREF:
            out.append(groups.get(arg, ""))
        elif op is sre.GROUPREF_EXISTS:
            group, yes, no = arg
            branch = yes if group in groups else no
            out.append(_emit(list(branch), extra, groups) if branch is not None else "")
        elif op is sre.CATEGORY:
            out.append(_pick(functools.partial(_in_category, arg)))
        # Anchors and lookarounds emit nothing; the final re.search judges them.
    return "".join(out)


def _pick(accepts: Callable[[str], bool]) -> str:
    return next((c for c in _POOL if accepts(c)), "a")


def _not_literal(code: int, char: str) -> bool:
    return ord(char) != code


def _in_class(members: list[tuple[Any, Any]], char: str) -> bool:
    negate = bool(members) and members[0][0] is sre.NEGATE
    found = False
    for op, arg in members[1:] if negate else members:
        if op is sre.LITERAL:
            found = ord(char) == arg
        elif op is sre.RANGE:
            found = arg[0] <= ord(char) <= arg[1]
        elif op is sre.CATEGORY:
            found = _in_category(arg, char)
        if found:
            break
    return found != negate


def _in_category(category: Any, char: str) -> bool:
    escape = _CATEGORY_ESCAPES.get(category)
    return escape is not None and re.fullmatch(escape, char) is not None
