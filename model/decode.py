"""Turn the text users have (``kubectl get -o yaml|json``, manifests) into typed objects.

Pure: text in, objects out; the shell reads the files. This is the one decoder for CLI files,
gRPC payloads and file inventories. It accepts multi-document YAML, JSON (one value, an array,
or a stream of values), and ``kind: List`` wrappers (``v1 List`` and ``<Kind>List``), applies
the API server's defaults (:func:`apply_defaults`) and reports every problem as
:class:`InvalidInput` naming the source, object and field, never as a traceback.

Three layers, each with its own guarantees:

* **Bounded parsing** (:func:`parse_documents`): the text is parsed under explicit
  :class:`DecodeLimits` (size, nesting depth, values added by YAML aliases, objects), without
  recursion, so no input can exhaust the stack or memory. YAML aliases are allowed (manifests
  use anchors) but what they expand to is counted; a mapping or list used as a key, a
  non-string key and text that is not valid Unicode are errors.
* **Strict field validation** (``validate``, kubectl's ``--validate=strict|warn|ignore``):
  unknown and duplicate fields are reported with the API server's wording and full field path
  (``unknown field "spec.devices.requests[0].exactly.cout"``): an error for ``strict``, a
  warning for ``warn``, nothing for ``ignore`` (the last duplicate wins, unknown fields are
  kept for the round trip).
* **Typed decoding** (:func:`decode_object`): as strict about types as the API server's JSON
  decoder; a string where a number belongs, ``yes`` for a boolean field or a bare number where
  an object belongs is an error, not a guess. Quantities are checked here, as the API server's
  decoder does, whatever ``validate`` says.

Semantic rules and limits are ``model.validation``'s job.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ValidationError

from dra_solver.model import coreschema
from dra_solver.model import objects as o
from dra_solver.model.errors import (
    MAX_STRUCTURED_CHARS,
    FieldPath,
    InvalidInput,
    StrictDecodingError,
    clip,
    quote,
)

ValidationMode = Literal["strict", "warn", "ignore"]
"""kubectl's ``--validate`` values (the API server's ``fieldValidation=Strict|Warn|Ignore``)."""

VALIDATION_MODES: tuple[ValidationMode, ...] = get_args(ValidationMode)

MAX_STRICT_PROBLEMS = 100
"""Unknown/duplicate fields reported per object, as the API server's strict decoder caps them."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What one input (a file, a gRPC payload) may hold; exceeding any is invalid input.

    The defaults are far above any real cluster's objects (the deepest API field is about ten
    levels down) and far below what would hurt the process.
    """

    max_chars: int = 64 * 1024 * 1024
    """Characters of text in one input."""
    max_depth: int = 100
    """Nesting of mappings and lists, counted from the document root."""
    max_alias_values: int = 100_000
    """Values that YAML aliases add when expanded (a 500-byte "billion laughs" adds 10^9)."""
    max_objects: int = 100_000
    """Top-level objects in one input, after ``List`` wrappers are flattened."""


DEFAULT_LIMITS = DecodeLimits()


def check_mode(mode: str) -> ValidationMode:
    """``mode`` as a :data:`ValidationMode`; anything else is invalid input."""
    for known in VALIDATION_MODES:
        if mode == known:
            return known
    supported = ", ".join(f'"{m}"' for m in VALIDATION_MODES)
    raise InvalidInput("", ("validate",), f"Unsupported value: {_shown(mode)}: supported values: {supported}")


# --- parsing ---------------------------------------------------------------------------------


class _Duplicated(dict[str, Any]):
    """A mapping that named some keys more than once (the last value won).

    Parsing records them here; strict field validation reports them with their full path.
    """

    __slots__ = ("duplicates",)

    def __init__(self, items: dict[str, Any] | None = None, duplicates: tuple[str, ...] = ()) -> None:
        super().__init__(items or {})
        self.duplicates = duplicates

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle keep what was duplicated
        return (_Duplicated, (dict(self), self.duplicates))

    def __repr__(self) -> str:  # content keys (repr) must tell it from a plain mapping
        return f"_Duplicated({dict.__repr__(self)}, {self.duplicates!r})"


def parse_documents(
    text: str,
    *,
    source: str = "",
    limits: DecodeLimits = DEFAULT_LIMITS,
    validate: ValidationMode = "ignore",
    warnings: list[StrictDecodingError] | None = None,
) -> list[dict[str, Any]]:
    """Every top-level object in ``text`` (YAML or JSON), with ``List`` kinds flattened.

    ``validate``/``warnings``: strict field validation of the ``List`` wrappers themselves
    (their objects are checked when decoded); ``ignore`` by default, for callers that pass on
    documents without field validation."""
    return list(iter_documents(text, source=source, limits=limits, validate=validate, warnings=warnings))


def json_value_at(text: str, start: int, *, limits: DecodeLimits = DEFAULT_LIMITS) -> tuple[Any, int] | None:
    """The JSON value that begins at ``text[start]`` (no blank before it) and the index just
    after it, decoded as :func:`parse_documents` decodes JSON (a mapping that repeats a key
    kept apart, for strict field validation). None wherever :func:`parse_documents` would
    refuse ``text`` or might read the value otherwise: too long, nested too deep anywhere,
    not Unicode, an escaped lone surrogate in the value, or no JSON value at ``start``. For a
    caller that knows the text around the value already (``service.claim_templates``)."""
    if len(text) > limits.max_chars or _json_depth_exceeds(text, limits.max_depth):
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    try:
        value, end = _JSON_DECODER.raw_decode(text, start)
    except ValueError:  # not JSON there, or an integer too long to convert
        return None
    if _JSON_SURROGATE_ESCAPE.search(text, start, end):
        return None
    return value, end


Progress = Callable[[int], None]
"""Told how many characters of the text have been read, as objects come out."""


def iter_documents(
    text: str,
    *,
    source: str = "",
    limits: DecodeLimits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    validate: ValidationMode = "ignore",
    warnings: list[StrictDecodingError] | None = None,
) -> Iterator[dict[str, Any]]:
    """:func:`parse_documents` one object at a time: YAML is read a document at a time, and each
    object of a ``List`` is released once the caller has it, so a caller that decodes and drops
    each raw object never holds the whole file's raw objects at once. Errors surface when the
    object they are in is reached (the size and Unicode checks come first)."""
    if len(text) > limits.max_chars:
        raise InvalidInput(
            "", (), f"input is {len(text)} characters: must be at most {limits.max_chars}", source=source
        )
    _check_unicode(text, source=source)
    count = 0
    for index, doc, position in _load(text, source=source, limits=limits):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InvalidInput(
                "",
                (),
                f"document {index}: expected an object, got {_json_type(doc)}",
                source=source,
            )
        for obj in _flatten_lists(doc, source=source, validate=validate, warnings=warnings):
            count += 1
            if count > limits.max_objects:
                raise InvalidInput(
                    "", (), f"more than {limits.max_objects} objects in one input", source=source
                )
            yield obj
        if progress is not None:
            progress(position)


def _check_unicode(text: str, *, source: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidInput(
            "", (), f"invalid Unicode at character {err.start}: lone surrogate", source=source
        ) from None


def _load(text: str, *, source: str, limits: DecodeLimits) -> Iterator[tuple[int, Any, int]]:
    """(index, document, characters read so far) of each top-level document."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            values = _load_json(stripped, limits=limits)
        except _TooDeep:
            raise InvalidInput(
                "", (), f"cannot parse JSON: nesting is deeper than {limits.max_depth} levels", source=source
            ) from None
        except _LoneSurrogate as err:
            raise InvalidInput("", (), f"cannot parse JSON: {err}", source=source) from None
        except json.JSONDecodeError as err:
            json_error = err
        except ValueError:  # Python refuses to convert integers this long
            raise InvalidInput("", (), f"cannot parse JSON: {_TOO_MANY_DIGITS}", source=source) from None
        else:
            yield from _release(values, len(text))
            return
        # YAML flow style also starts with a brace; only report JSON's complaint if YAML fails too.
        try:
            docs = list(_load_yaml(text, limits=limits))
        except (yaml.YAMLError, _YamlLimit):
            raise InvalidInput(
                "",
                (),
                f"cannot parse JSON: line {json_error.lineno}, column {json_error.colno}: {json_error.msg}",
                source=source,
            ) from None
        yield from ((i, doc, pos) for i, (doc, pos) in enumerate(docs))
        return
    try:
        for index, (doc, position) in enumerate(_load_yaml(text, limits=limits)):
            yield index, doc, position
    except _YamlLimit as err:
        raise InvalidInput("", (), f"cannot parse YAML: {err}", source=source) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = err.problem or err.context or "invalid YAML"
        raise InvalidInput("", (), f"cannot parse YAML: {where}{what}", source=source) from None
    except yaml.YAMLError as err:
        raise InvalidInput("", (), f"cannot parse YAML: {_one_line(err)}", source=source) from None


def _release(values: list[Any], size: int) -> Iterator[tuple[int, Any, int]]:
    """JSON values one by one, each dropped from ``values`` once handed out (the position is
    the share of the values handed out, JSON being parsed whole)."""
    total = len(values)
    for index in range(total):
        value, values[index] = values[index], None
        yield index, value, size * (index + 1) // total


# JSON: Python's decoder recurses once per level, so the depth is measured on the text first.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]|\\u[dD][c-fC-F]")


_TOO_MANY_DIGITS = f"a number has more than {sys.get_int_max_str_digits()} digits"


class _TooDeep(ValueError):
    pass


class _LoneSurrogate(ValueError):
    pass


def _load_json(text: str, *, limits: DecodeLimits) -> list[Any]:
    """One JSON value, an array of them, or several values one after another."""
    if _json_depth_exceeds(text, limits.max_depth):
        raise _TooDeep
    decoder = _JSON_DECODER
    values: list[Any] = []
    pos = 0
    while pos < len(text):
        value, pos = decoder.raw_decode(text, pos)
        values.append(value)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if _JSON_SURROGATE_ESCAPE.search(text):
        _find_lone_surrogates(values)
    if len(values) == 1 and isinstance(values[0], list):
        return list(values[0])
    return values


_JSON_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_JSON_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_ONE_BRACKET_KIND = bytes.maketrans(b"{}", b"[]")


def _json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than ``limit``. The brackets are picked out
    in C (:func:`_json_brackets`); each pass then drops the innermost pairs (one level), so a
    document of depth d costs d passes over its brackets, and at most ``limit`` passes are made
    whatever the input."""
    if text.count("[") + text.count("{") <= limit:
        return False  # no deeper than the number of opening brackets, strings' included
    brackets = _json_brackets(text)
    removed = 0  # levels dropped so far; they never enclose what is left
    while removed <= limit:
        if not brackets:
            return False
        fewer = brackets.replace(b"[]", b"")
        if len(fewer) == len(brackets):
            break  # unbalanced: measure what is left one bracket at a time
        brackets = fewer
        removed += 1
    levels = itertools.accumulate(1 if b == 0x5B else -1 for b in brackets)
    return removed + max(levels, default=0) > limit


def _json_brackets(text: str) -> bytes:
    """The brackets of ``text`` outside its strings, ``{}`` written as ``[]`` (nesting is what
    counts; mismatched kinds fail parsing anyway).

    Fast path, all in C: escapes dropped, then everything but quotes and brackets, then each
    string becomes a pair of adjacent quotes, dropped in one pass. A string holding a bracket
    leaves a quote behind (quotes alternate open/close, so pairing adjacent ones cannot consume
    both quotes of a string with a bracket inside: an odd run would be left over); only then are
    strings removed by the (slower) regular expression."""
    data = text.encode("utf-8", "surrogatepass")
    if b"\\" in data:
        data = _JSON_ESCAPE.sub(b"", data)
    kept = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in kept:
        kept = _JSON_NOT_BRACKET.sub("", _JSON_STRING.sub("", text)).encode("ascii")
    return kept.translate(_ONE_BRACKET_KIND)


def _json_mapping(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    duplicates = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return _Duplicated(out, duplicates)


_JSON_DECODER = json.JSONDecoder(object_pairs_hook=_json_mapping)
"""Made once: it keeps no state between documents (its scanner's key memo is only a cache)."""


def _find_lone_surrogates(values: list[Any]) -> None:
    """Escapes such as ``\\ud800`` decode to text that is not Unicode; refuse it here rather
    than fail later when the text is encoded for a response."""
    pending: list[Any] = list(values)
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            texts: Iterable[str] = (value,)
        elif isinstance(value, dict):
            pending.extend(value.values())
            texts = value.keys()
        elif isinstance(value, list):
            pending.extend(value)
            continue
        else:
            continue
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise _LoneSurrogate(
                    f"string {json.dumps(text[:40])} holds a lone surrogate, which is not valid Unicode"
                ) from None


# YAML: built from the parser's events with an explicit stack (PyYAML's composer recurses once
# per level), counting depth and what aliases expand to as it goes.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_SCALARS = yaml.constructor.SafeConstructor()
_MERGE_TAG = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:str",
}
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"  # kept as written, as the API machinery does
_RESOLVED_FIRST = frozenset(k for k in _RESOLVER.yaml_implicit_resolvers if k)
"""First characters that may make a plain scalar something other than a string."""
assert None not in _RESOLVER.yaml_implicit_resolvers  # no resolver that looks at every scalar
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"


class _YamlLimit(ValueError):
    """A limit or a structure JSON cannot hold (non-string key, unknown anchor), with where."""

    def __init__(self, mark: Any, message: str) -> None:
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        super().__init__(f"{where}{message}")


class _Merge:
    """The ``<<`` merge key: its value's entries fill in keys the mapping does not set."""


_MERGE = _Merge()
_NO_KEY = object()


@dataclass(slots=True)
class _Frame:
    """One mapping or list under construction."""

    value: Any
    """The dict or list being filled."""
    anchor: str | None
    is_list: bool
    start: int
    """Values counted before this one began: its size (itself, its keys and values, what its
    aliases expand to) is the count when it ends minus this."""
    height: int = 1
    key: Any = _NO_KEY
    """The key waiting for its value (mappings), saved while a nested value is built."""
    duplicates: list[str] | None = None
    merges: list[Any] | None = None


def _load_yaml(text: str, *, limits: DecodeLimits) -> Iterator[tuple[Any, int]]:
    """Each document, and the characters read once it ends.

    The hot loop of large inventories: dispatch on the event's class; the innermost mapping or
    list, its pending key and the running value count are locals (saved in the frame while a
    nested value is built); scalars are resolved without PyYAML's per-node machinery when their
    text alone decides (see :class:`_PlainScalars`).
    """
    anchors: dict[str, tuple[Any, int, int]] = {}  # name -> (value, size, height)
    stack: list[_Frame] = []
    alias_values = 0
    counted = 0  # scalars, mappings and lists so far (an alias: what its anchor expands to)
    plain = _PlainScalars()
    plain_memo = plain.memo
    done: list[Any] = []  # the document just completed (at most one)
    scalar_event, mapping_start, sequence_start = yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent
    mapping_end, sequence_end, alias_event = yaml.MappingEndEvent, yaml.SequenceEndEvent, yaml.AliasEvent
    document_start, document_end = yaml.DocumentStartEvent, yaml.DocumentEndEvent
    resolved_first = _RESOLVED_FIRST
    event: Any  # the event classes' attributes are dispatched on by class below
    top: _Frame | None = None  # stack[-1], with its value, kind and pending key at hand:
    items: Any = None
    in_list = False
    key: Any = _NO_KEY
    value: Any
    loader = _Loader(text)
    next_event = loader.get_event  # None after the stream's end (yaml.parse, without its generator)
    try:
        while (event := next_event()) is not None:
            cls = type(event)
            if cls is scalar_event:
                counted += 1
                if top is not None and event.tag is None and event.anchor is None:
                    # The common case, inlined: an untagged scalar inside a mapping or list.
                    value = event.value
                    if event.implicit[0] and (not value or value[0] in resolved_first):
                        resolved = plain_memo.get(value, _NO_KEY)  # most are seen before
                        value = plain.value(event) if resolved is _NO_KEY else resolved
                    if in_list:
                        items.append(event.value if value is _MERGE else value)
                    elif key is _NO_KEY:
                        if type(value) is not str and value is not _MERGE:
                            raise _YamlLimit(event.start_mark, f"mapping keys must be strings, not {_json_type(value)}")
                        key = value
                    else:
                        if value is _MERGE:
                            value = event.value
                        if key is _MERGE:
                            _merges(top).append(value)
                        else:
                            if key in items:
                                _duplicates(top).append(key)
                            items[key] = value
                        key = _NO_KEY
                    continue
                value = _scalar(event, key=top is not None and not in_list and key is _NO_KEY, plain=plain)
                size, height, anchor = 1, 0, event.anchor
            elif cls is mapping_end or cls is sequence_end:
                frame = stack.pop()
                value = frame.value
                if not frame.is_list:
                    value = _finish_mapping(value, frame, event.start_mark)
                size, height, anchor = counted - frame.start, frame.height, frame.anchor
                top = stack[-1] if stack else None
                if top is not None:
                    items, in_list, key = top.value, top.is_list, top.key
            elif cls is mapping_start or cls is sequence_start:
                if top is not None and not in_list and key is _NO_KEY:
                    raise _YamlLimit(event.start_mark, "a mapping or list cannot be a mapping key")
                if len(stack) + 1 > limits.max_depth:
                    raise _YamlLimit(event.start_mark, f"nesting is deeper than {limits.max_depth} levels")
                is_list = cls is sequence_start
                expected = _SEQ_TAG if is_list else _MAP_TAG
                if event.tag not in (None, "!", expected):
                    raise _YamlLimit(event.start_mark, f"unsupported tag {event.tag}")
                if top is not None:
                    top.key = key
                items = [] if is_list else {}
                top = _Frame(items, event.anchor, is_list, counted)
                counted += 1
                stack.append(top)
                in_list, key = is_list, _NO_KEY
                continue
            elif cls is alias_event:
                if event.anchor not in anchors:
                    raise _YamlLimit(event.start_mark, f"unknown anchor {event.anchor!r}")
                value, size, height = anchors[event.anchor]
                alias_values += size
                if alias_values > limits.max_alias_values:
                    raise _YamlLimit(
                        event.start_mark, f"aliases expand to more than {limits.max_alias_values} values"
                    )
                if len(stack) + height > limits.max_depth:
                    raise _YamlLimit(event.start_mark, f"nesting is deeper than {limits.max_depth} levels")
                counted += size
                anchor = None
            elif cls is document_start:
                anchors.clear()  # anchors do not cross documents
                continue
            elif cls is document_end:
                if done:
                    yield done.pop(), event.end_mark.index
                else:
                    yield None, event.end_mark.index  # an empty document
                continue
            else:
                continue
            # A value that is not the inlined common case: remember its anchor, then place it.
            if anchor is not None:
                anchors[anchor] = (value, size, height)
            if top is None:
                done.append(value)
                continue
            if height >= top.height:
                top.height = height + 1
            if in_list:
                items.append(value)
            elif key is _NO_KEY:
                if value is not _MERGE and type(value) is not str:
                    raise _YamlLimit(event.start_mark, f"mapping keys must be strings, not {_json_type(value)}")
                key = value
            elif key is _MERGE:
                _merges(top).append(value)
                key = _NO_KEY
            else:
                if key in items:
                    _duplicates(top).append(key)
                items[key] = value
                key = _NO_KEY
    finally:
        loader.dispose()
    while done:  # a stream without a document end (not produced by PyYAML, kept for safety)
        yield done.pop(0), len(text)


def _merges(frame: _Frame) -> list[Any]:
    if frame.merges is None:
        frame.merges = []
    return frame.merges


def _duplicates(frame: _Frame) -> list[str]:
    if frame.duplicates is None:
        frame.duplicates = []
    return frame.duplicates


_PLAIN_MEMO_SIZE = 65_536
"""Distinct plain scalars remembered per input (their values are immutable)."""


class _PlainScalars:
    """Values of plain (unquoted) scalars. Most plain text is a string whatever it says: only a
    first character with an implicit resolver (digits, signs, ``t``/``f``/``n``/``y``/``o``,
    ``~``, ``.``, ``<``, ...) can make it a number, boolean, null, timestamp or merge key, and
    those are resolved once per distinct text (inventories repeat the same few)."""

    __slots__ = ("memo",)

    def __init__(self) -> None:
        self.memo: dict[str, Any] = {}
        """Text -> value of the plain scalars resolved so far (read directly by the hot loop)."""

    def value(self, event: Any) -> Any:
        text: str = event.value
        if text and text[0] not in _RESOLVED_FIRST:
            return text
        hit = self.memo.get(text, _NO_KEY)
        if hit is not _NO_KEY:
            return hit
        value = _scalar(event, key=True, plain=None)
        if len(self.memo) < _PLAIN_MEMO_SIZE:
            self.memo[text] = value
        return value


def _scalar(event: yaml.ScalarEvent, *, key: bool, plain: _PlainScalars | None) -> Any:
    tag = event.tag
    if tag is None or tag == "!":
        if plain is not None and tag is None and event.implicit[0]:
            value = plain.value(event)
            return event.value if value is _MERGE and not key else value
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
    if tag == _MERGE_TAG and key:
        return _MERGE
    if tag in (_TIMESTAMP_TAG, _MERGE_TAG):
        return event.value
    if tag not in _SCALAR_TAGS:
        raise _YamlLimit(event.start_mark, f"unsupported tag {tag}")
    node = yaml.ScalarNode(tag, event.value, None, None, event.style)
    try:
        return _SCALARS.yaml_constructors[tag](_SCALARS, node)
    except ValueError:  # Python refuses to convert integers this long
        raise _YamlLimit(event.start_mark, _TOO_MANY_DIGITS) from None


def _finish_mapping(built: dict[str, Any], frame: _Frame, mark: Any) -> dict[str, Any]:
    for merged in frame.merges or ():
        sources = merged if isinstance(merged, list) else [merged]
        for each in sources:
            if not isinstance(each, dict):
                raise _YamlLimit(mark, "a merge key (<<) takes a mapping or a list of mappings")
            for k, v in each.items():
                built.setdefault(k, v)
    if frame.duplicates:
        return _Duplicated(built, tuple(dict.fromkeys(frame.duplicates)))
    return built


def _flatten_lists(
    doc: dict[str, Any],
    *,
    source: str,
    validate: ValidationMode = "ignore",
    warnings: list[StrictDecodingError] | None = None,
) -> Iterator[dict[str, Any]]:
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and kind not in o.KIND_MODELS:
        if validate != "ignore":
            _check_list_fields(doc, kind, source=source, validate=validate, warnings=warnings)
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise InvalidInput(
                kind, ("items",), f"Invalid value: {_shown(items)}: must be a list", source=source
            )
        item_kind = kind[: -len("List")] or None
        for index in range(len(items)):
            # Released as it is handed out: the caller decodes and drops each object, so the
            # raw objects of a large List are never all held beside their decoded forms.
            # (Nothing else can refer to this list: the wrapper's other fields are dropped.)
            item, items[index] = items[index], None
            if not isinstance(item, dict):
                raise InvalidInput(
                    kind,
                    ("items", index),
                    f"Invalid value: {_shown(item)}: must be an object",
                    source=source,
                )
            if item_kind and "kind" not in item:
                with_kind = {**item, "kind": item_kind}
                if isinstance(item, _Duplicated):
                    with_kind = _Duplicated(with_kind, item.duplicates)
                item = with_kind
            if item_kind and "apiVersion" not in item and isinstance(doc.get("apiVersion"), str):
                # An API list (``ResourceClaimList``) gives its items' version once, on the list.
                with_version = {"apiVersion": doc["apiVersion"], **item}
                if isinstance(item, _Duplicated):
                    with_version = _Duplicated(with_version, item.duplicates)
                item = with_version
            # Depth is bounded by parsing.
            yield from _flatten_lists(item, source=source, validate=validate, warnings=warnings)
        return
    yield doc


_LIST_FIELDS = {"apiVersion": "string", "kind": "string", "metadata": "ListMeta", "items": "any"}
"""A ``List`` wrapper (``v1 List``, ``<Kind>List``): TypeMeta, ListMeta and its items (which
are checked as the objects they are)."""


def _check_list_fields(
    doc: dict[str, Any],
    kind: str,
    *,
    source: str,
    validate: ValidationMode,
    warnings: list[StrictDecodingError] | None,
) -> None:
    """Unknown and duplicate fields of a List wrapper. kubectl's client-side flattening would
    drop them silently; a typo there changes nothing kubectl sends, but strict validation is
    this project's rule, so they are reported as for any object."""
    problems = _shape_problems(_list_shape(), doc)
    if problems and validate == "strict":
        raise StrictDecodingError(kind, problems, source=source)
    if problems and warnings is not None:
        warnings.extend(StrictDecodingError(kind, [p], source=source) for p in problems)


# --- objects ---------------------------------------------------------------------------------


def decode_object(
    doc: dict[str, Any],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> o.TypedObject:
    """One API object from its JSON form; defaults applied.

    ``validate``: unknown and duplicate fields raise :class:`StrictDecodingError` (``strict``),
    are appended to ``warnings`` (``warn``), or pass silently (``ignore``).
    """
    kind = _known_kind(doc, o.KIND_MODELS, source=source)
    model = o.KIND_MODELS[kind]
    allowed = ("v1",) if kind == "Node" else o.RESOURCE_API_VERSIONS
    _check_api_version(doc, allowed, source=source)
    check_fields(doc, source=source, validate=validate, warnings=warnings)
    # After strict field validation: a duplicated or misspelt apiVersion is reported as such.
    _require_api_version(doc, source=source, validate=validate)
    if kind in _SCHEMA_KINDS and validate != "ignore":
        # Node: its typed model keeps spec and status opaque. Not for ``ignore`` (an API
        # server's objects, the watch path's thousands of node updates: their types are right).
        _check_types(kind, doc, source=source)
    try:
        obj = model.model_validate(_drop_nulls(doc), strict=True)
    except ValidationError as err:
        raise _from_validation_error(_describe_raw(doc), model, err, source=source) from None
    apply_defaults(obj)
    return obj


def decode_metadata(raw: Any) -> o.ObjectMeta | None:
    """``metadata`` of an object document on its own, as :func:`decode_object` reads it in
    strict mode; None unless it is a mapping without unknown or duplicate fields whose values
    are of their types. For a caller that already holds the rest of an equal object decoded
    (the service's claims, one template for thousands of pods): on None it decodes the whole
    document, which reports the problem as usual."""
    if type(raw) is not dict or not fields_clean(o.ObjectMeta, raw):
        return None
    try:
        return o.ObjectMeta.model_validate(_drop_nulls(raw), strict=True)
    except ValidationError:
        return None


def check_fields(
    doc: dict[str, Any],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> None:
    """Strict field validation of one object's document (see :func:`decode_object`); a kind
    that is not ours is left for :func:`decode_object` to report."""
    if validate == "ignore":
        return
    kind = doc.get("kind")
    shape = _kind_shape(kind) if isinstance(kind, str) else None
    if shape is None:
        return
    problems = _shape_problems(shape, doc)
    if problems and validate == "strict":
        raise StrictDecodingError(_describe_raw(doc), problems, source=source)
    if problems and warnings is not None:
        warnings.extend(StrictDecodingError(_describe_raw(doc), [p], source=source) for p in problems)


def decode_text(
    text: str,
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    limits: DecodeLimits = DEFAULT_LIMITS,
    warnings: list[StrictDecodingError] | None = None,
) -> list[o.TypedObject]:
    docs = parse_documents(text, source=source, limits=limits, validate=validate, warnings=warnings)
    return [decode_object(doc, source=source, validate=validate, warnings=warnings) for doc in docs]


def decode_all(
    docs: Iterable[dict[str, Any]],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> list[o.TypedObject]:
    return [decode_object(doc, source=source, validate=validate, warnings=warnings) for doc in docs]


def _drop_nulls(value: Any) -> Any:
    # Go's decoder treats an explicit null like an absent field.
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


# --- strict field validation -----------------------------------------------------------------

_Shape = tuple[str, Any]
"""How a field's value is read: ("model", {alias: shape}), ("list", shape), ("map", shape),
or ("opaque", None) for values the API itself leaves free-form (opaque parameters)."""

_OPAQUE: _Shape = ("opaque", None)


def field_problems(model: type[BaseModel], doc: dict[str, Any]) -> list[tuple[FieldPath, str]]:
    """Unknown and duplicate fields of ``doc`` read as ``model``, with their paths, in document
    order, at most :data:`MAX_STRICT_PROBLEMS` (the API server's cap)."""
    return _shape_problems(_model_shape(model), doc)


def _shape_problems(shape: _Shape, doc: dict[str, Any]) -> list[tuple[FieldPath, str]]:
    if _clean(shape, doc):
        return []
    problems: list[tuple[FieldPath, str]] = []
    _walk(shape, doc, (), problems)
    return problems[:MAX_STRICT_PROBLEMS]


def _kind_shape(kind: str) -> _Shape | None:
    """How strict field validation reads ``kind``: the generated schema of the kinds read as
    documents (and of Node, whose model keeps spec and status opaque), else the typed model."""
    if kind in _SCHEMA_KINDS:
        return _schema_shape(kind)
    model = o.KIND_MODELS.get(kind)
    return _model_shape(model) if model is not None else None


def without_devices(doc: dict[str, Any]) -> dict[str, Any]:
    """A ResourceSlice document with an empty device list (what was duplicated is kept), for
    checking and decoding the rest of a slice whose devices are handled one by one."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return doc
    return _replaced(doc, "spec", _replaced(spec, "devices", []))


def _replaced(mapping: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = {**mapping, key: value}
    return _Duplicated(out, mapping.duplicates) if isinstance(mapping, _Duplicated) else out


def fields_clean(model: type[BaseModel], doc: Any) -> bool:
    """Whether ``doc`` read as ``model`` has no unknown or duplicate field: the common case,
    answered without building paths (set operations per mapping); :func:`field_problems`
    walks again for the paths only when it is not."""
    return _clean(_model_shape(model), doc)


def _clean(shape: _Shape, value: Any) -> bool:
    what, inner = shape
    if what == "opaque":
        return True
    if what == "list":
        if type(value) is list and inner[0] != "opaque":
            return all(_clean(inner, item) for item in value)
        return True
    if not isinstance(value, dict):
        return True
    if type(value) is _Duplicated:
        return False
    if what == "map":
        return inner[0] == "opaque" or all(_clean(inner, item) for item in value.values())
    keys, children = _compiled_fields(inner)
    if not value.keys() <= keys:
        return False
    for key, child in children:
        item = value.get(key)
        if item is not None and not _clean(child, item):
            return False
    return True


_compiled: dict[Any, tuple[frozenset[str], tuple[tuple[str, _Shape], ...]]] = {}


def _compiled_fields(fields: Any) -> tuple[frozenset[str], tuple[tuple[str, _Shape], ...]]:
    """A model's field names, and those whose values have fields of their own."""
    hit = _compiled.get(fields)
    if hit is None:
        table = typing.cast(dict[str, _Shape], fields())
        # Lists of free-form values are always clean (a map of them is not: it can repeat a key).
        hit = (frozenset(table), tuple((k, v) for k, v in table.items() if v[0] != "opaque" and v != ("list", _OPAQUE)))
        _compiled[fields] = hit
    return hit


def _walk(shape: _Shape, value: Any, path: FieldPath, problems: list[tuple[FieldPath, str]]) -> None:
    if len(problems) >= MAX_STRICT_PROBLEMS:
        return
    what, inner = shape
    if what == "opaque":
        return
    if what == "list":
        if isinstance(value, list):
            for index, item in enumerate(value):
                _walk(inner, item, (*path, index), problems)
        return
    if not isinstance(value, dict):
        return  # a type mismatch; typed decoding reports it
    if isinstance(value, _Duplicated):
        problems.extend(((*path, key), "duplicate field") for key in value.duplicates)
    if what == "map":
        for key, item in value.items():
            _walk(inner, item, (*path, key), problems)
        return
    fields = typing.cast(dict[str, _Shape], inner())
    for key, item in value.items():
        child = fields.get(key)
        if child is None:
            problems.append(((*path, key), "unknown field"))
        else:
            _walk(child, item, (*path, key), problems)


@functools.cache
def _model_fields(model: type[BaseModel]) -> dict[str, _Shape]:
    out: dict[str, _Shape] = {}
    for name, info in model.model_fields.items():
        out[info.alias or name] = _shape(info.annotation)
    return out


@functools.cache
def _model_shape(model: type[BaseModel]) -> _Shape:
    # Fields are looked up lazily so that models referring to each other need no ordering
    # (one shape per model, so that its compiled field table is found by identity).
    return ("model", functools.partial(_model_fields, model))


def _shape(annotation: Any) -> _Shape:
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_shape(annotation)
    if origin is list:
        return ("list", _shape(typing.get_args(annotation)[0]))
    if origin is dict:
        return ("map", _shape(typing.get_args(annotation)[1]))
    return _OPAQUE


# The kinds with a generated schema (``model.coreschema``): Pod and PodGroup are read as
# documents (``model.podgroup``, ``model.podfit``); Node has a typed model for its metadata.
_SCHEMA_KINDS = frozenset({"Pod", "PodGroup", "Node"})


@functools.cache
def _schema_shape(spec: str) -> _Shape:
    if spec.startswith("[]"):
        return ("list", _schema_shape(spec[2:]))
    if spec.startswith("map["):
        return ("map", _schema_shape(spec[4:-1]))
    if spec in coreschema.TYPES:
        return ("model", functools.partial(_schema_fields, spec))
    return _OPAQUE


@functools.cache
def _schema_fields(name: str) -> dict[str, _Shape]:
    return {key: _schema_shape(spec) for key, spec in coreschema.TYPES[name].items()}


@functools.cache
def _list_shape() -> _Shape:
    fields = {key: _schema_shape(spec) for key, spec in _LIST_FIELDS.items()}
    return ("model", lambda: fields)


# --- documents (Pod, PodGroup) -----------------------------------------------------------------

PODGROUP_API_VERSION = "scheduling.k8s.io/v1beta1"

DOCUMENT_API_VERSIONS: dict[str, tuple[str, ...]] = {
    "Pod": ("v1",),
    "PodGroup": (PODGROUP_API_VERSION,),
}
"""The kinds read as documents (the API's JSON form, no typed model) and their versions."""


def decode_document(
    doc: dict[str, Any],
    *,
    source: str = "",
    validate: ValidationMode = "strict",
    warnings: list[StrictDecodingError] | None = None,
) -> dict[str, Any]:
    """A Pod or PodGroup from a user's file, checked as the API server's decoder checks it:
    ``apiVersion`` and ``kind``, unknown and duplicate fields (``validate``, as in
    :func:`decode_object`) and every field's type (whatever ``validate`` says: the
    ``model.podgroup`` and ``model.podfit`` readers rely on it). Returns the document with
    explicit nulls dropped (Go's decoder treats them as absent).

    Only for input from users: the controllers' objects come from an API server, which sends
    neither unknown fields nor wrong types, and are not checked again."""
    kind = _known_kind(doc, DOCUMENT_API_VERSIONS, source=source)
    versions = DOCUMENT_API_VERSIONS[kind]
    _check_api_version(doc, versions, source=source)
    check_fields(doc, source=source, validate=validate, warnings=warnings)
    _require_api_version(doc, source=source, validate=validate)
    _check_types(kind, doc, source=source)
    out: dict[str, Any] = _drop_nulls(doc)
    return out


def _checked_kind(doc: dict[str, Any], *, source: str) -> str:
    """``kind``: a non-empty string. A missing one is worded as kubectl words it; one of
    another type as the API server's decoder reads it (``couldn't get version/kind``)."""
    kind = doc.get("kind")
    if isinstance(kind, str) and kind:
        return kind
    name = _describe_raw(doc)
    if kind is None or kind == "":
        raise InvalidInput(name, ("kind",), "Required value: kind must be set", source=source)
    raise InvalidInput(name, ("kind",), _meta_type_detail("kind", kind), source=source)


def _check_api_version(doc: dict[str, Any], allowed: tuple[str, ...], *, source: str) -> None:
    """``apiVersion``, when set: one of ``allowed`` (:func:`_require_api_version` says when it
    is missing, after strict field validation has had the chance to call it misspelt)."""
    api_version = doc.get("apiVersion")
    if api_version is None or api_version == "" or api_version in allowed:
        return
    if not isinstance(api_version, str):
        raise InvalidInput(_describe_raw(doc), ("apiVersion",), _meta_type_detail("apiVersion", api_version), source=source)
    supported = ", ".join(f'"{v}"' for v in allowed)
    raise InvalidInput(
        _describe_raw(doc), ("apiVersion",), f"Unsupported value: {_shown(api_version)}: supported values: {supported}", source=source
    )


def _require_api_version(doc: dict[str, Any], *, source: str, validate: ValidationMode) -> None:
    """A manifest must say its ``apiVersion``, unless ``validate="ignore"`` (objects an API
    server already accepted, maybe without it)."""
    if validate != "ignore" and not doc.get("apiVersion"):
        raise InvalidInput(_describe_raw(doc), ("apiVersion",), "Required value: apiVersion must be set", source=source)


_GO_JSON_TYPES = {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def _meta_type_detail(field: str, value: Any) -> str:
    go_type = next((name for t, name in _GO_JSON_TYPES.items() if isinstance(value, t)), "value")
    return (
        f"Invalid value: {_shown(value)}: must be a string, not {_json_type(value)} (couldn't get "
        f"version/kind; json parse error: json: cannot unmarshal {go_type} into Go struct field .{field} of type string)"
    )


def _known_kind(doc: dict[str, Any], kinds: Collection[str], *, source: str) -> str:
    """:func:`_checked_kind`, and one of ``kinds``."""
    kind = _checked_kind(doc, source=source)
    if kind not in kinds:
        supported = ", ".join(f'"{k}"' for k in sorted(kinds))
        raise InvalidInput(_describe_raw(doc), ("kind",), f"Unsupported value: {_shown(kind)}: supported values: {supported}", source=source)
    return kind


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_INT_BOUNDS = {32: (INT32_MIN, INT32_MAX), 64: (INT64_MIN, INT64_MAX)}


def int_range_detail(value: int, bits: int) -> str:
    """Why ``value`` does not fit a Go ``int{bits}`` (as the API server's decoder refuses it)."""
    low, high = _INT_BOUNDS[bits]
    bound = f"at most {high}" if value > high else f"at least {low}"
    return f"Invalid value: {value}: must be {bound} (int{bits})"


def _check_types(kind: str, doc: dict[str, Any], *, source: str) -> None:
    problem = _type_problem(kind, doc, ())
    if problem is not None:
        path, detail = problem
        raise InvalidInput(_describe_raw(doc), path, detail, source=source)


_SCALAR_EXPECTED = {
    "string": "a string",
    "quantity": "a quantity (a string or a number)",
    "integer": "an integer",
    "int32": "an integer",
    "number": "a number",
    "boolean": "a boolean",
}


def _type_problem(spec: str, value: Any, path: FieldPath) -> tuple[FieldPath, str] | None:
    """The first value of ``value`` that is not of its schema type ``spec``, as (path, detail);
    unknown fields are left to strict field validation, explicit nulls are absent values."""
    if value is None or spec == "any":
        return None
    if spec.startswith("[]"):
        if not isinstance(value, list):
            return path, _wrong_type(value, "a list")
        for index, item in enumerate(value):
            problem = _type_problem(spec[2:], item, (*path, index))
            if problem is not None:
                return problem
        return None
    if spec.startswith("map["):
        if not isinstance(value, dict):
            return path, _wrong_type(value, "an object")
        inner = spec[4:-1]
        for key, item in value.items():
            problem = _type_problem(inner, item, _map_key(path, key))
            if problem is not None:
                return problem
        return None
    fields = coreschema.TYPES.get(spec)
    if fields is not None:
        if not isinstance(value, dict):
            # The generator's one name for Go's empty structs names nothing a user wrote.
            return path, _wrong_type(value, "an object" if spec == "Empty" else f"an object ({spec})")
        for key, item in value.items():
            child = fields.get(key)
            if child is not None:
                problem = _type_problem(child, item, (*path, key))
                if problem is not None:
                    return problem
        return None
    return _scalar_problem(spec, value, path)


def _scalar_problem(spec: str, value: Any, path: FieldPath) -> tuple[FieldPath, str] | None:
    if isinstance(value, bool):
        ok = spec == "boolean"
    elif isinstance(value, int):
        if spec in ("integer", "int32"):
            bits = 32 if spec == "int32" else 64
            low, high = _INT_BOUNDS[bits]
            return None if low <= value <= high else (path, int_range_detail(value, bits))
        ok = spec in ("number", "quantity")
    elif isinstance(value, float):
        ok = spec in ("number", "quantity")
    elif isinstance(value, str):
        ok = spec in ("string", "quantity")
    else:
        ok = False
    return None if ok else (path, _wrong_type(value, _SCALAR_EXPECTED.get(spec, spec)))


def _wrong_type(value: Any, expected: str) -> str:
    return f"Invalid value: {_shown(value)}: must be {expected}, not {_json_type(value)}"


def _map_key(path: FieldPath, key: str) -> FieldPath:
    """A map entry's path as typed decoding shows it: ``metadata.labels[key]``."""
    if path and isinstance(path[-1], str):
        return (*path[:-1], f"{path[-1]}[{key}]")
    return (*path, f"[{key}]")


# --- defaults -------------------------------------------------------------------------------


def apply_defaults(obj: o.TypedObject) -> None:
    """The API server's defaulting for the kinds we read (in place, idempotent).

    A request without ``allocationMode`` is ExactCount, ExactCount without ``count`` asks for one
    device, and a toleration without ``operator`` uses Equal. An explicit ``count: 0`` is kept
    (and then rejected by validation) rather than silently turned into 1.
    """
    if isinstance(obj, o.ResourceClaim):
        _default_claim_spec(obj.spec)
    elif isinstance(obj, o.ResourceClaimTemplate):
        _default_claim_spec(obj.spec.spec)


def _default_claim_spec(spec: o.ResourceClaimSpec) -> None:
    for request in spec.devices.requests or []:
        if request.exactly is not None:
            _default_request(request.exactly)
        for sub in request.first_available or []:
            _default_request(sub)


def _default_request(req: o.ExactDeviceRequest | o.DeviceSubRequest) -> None:
    if not req.allocation_mode:
        req.allocation_mode = "ExactCount"
    if req.allocation_mode == "ExactCount" and req.count is None:
        req.count = 1
    for toleration in req.tolerations or []:
        if not toleration.operator:
            toleration.operator = "Equal"


# --- error translation ----------------------------------------------------------------------


def _describe_raw(doc: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` of a document not decoded yet: a value that is not a string
    (a wrong type, reported on its own) never shows as Python's repr."""
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) and doc.get("kind") else "object"
    raw_meta = doc.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    name = _text(meta.get("name")) or _text(meta.get("generateName")) or "<unnamed>"
    ns = _text(meta.get("namespace"))
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def describe_document(doc: Mapping[str, Any]) -> str:
    """How messages name a document (``PodGroup default/train``)."""
    return _describe_raw(doc)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


_EXPECTED = {
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "float_type": "a number",
    "float_parsing": "a number",
}


def _from_validation_error(
    name: str, model: type[BaseModel], err: ValidationError, *, source: str
) -> InvalidInput:
    problems = err.errors()
    first = problems[0]
    path, target = _field_path(model, first["loc"])
    value = first.get("input")
    kind = first["type"]
    if kind == "missing":
        detail = "Required value"
    elif kind in ("less_than_equal", "greater_than_equal") and isinstance(value, int) and not (INT64_MIN <= value <= INT64_MAX):
        detail = int_range_detail(value, 64)  # o.Int64: the API's integers are int64
    elif kind in _EXPECTED:
        expected = _EXPECTED[kind]
        if expected == "an object" and target:
            expected = f"an object ({target})"
        detail = f"Invalid value: {_shown(value)}: must be {expected}, not {_json_type(value)}"
    else:
        detail = f"Invalid value: {_shown(value)}: {first['msg'][:1].lower()}{first['msg'][1:]}"
    extra = len(problems) - 1
    if extra:
        detail += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return InvalidInput(name, path, detail, source=source)


def _field_path(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[FieldPath, str]:
    """pydantic's error location as an API field path (map keys in brackets), plus the name of
    the model expected at that location (for "must be an object (DeviceCapacity)")."""
    path: list[str | int] = []
    current: Any = model
    for part in loc:
        annotation = _unwrap(current)
        origin = typing.get_origin(annotation)
        if isinstance(part, int) and origin is list:
            path.append(part)
            current = typing.get_args(annotation)[0]
        elif (
            isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
            and isinstance(part, str)
        ):
            field = _field_by_alias(annotation, part)
            path.append(part)
            current = field.annotation if field is not None else Any
        elif origin is dict and isinstance(part, str):
            key = f"[{part}]"
            if path and isinstance(path[-1], str):
                path[-1] = path[-1] + key
            else:
                path.append(key)
            current = typing.get_args(annotation)[1]
        elif isinstance(part, int):
            path.append(part)
            current = Any
        else:
            # A union branch tag (type or validator name), not part of the object.
            continue
    target = _unwrap(current)
    name = target.__name__ if isinstance(target, type) and issubclass(target, BaseModel) else ""
    return tuple(path), name


def _unwrap(annotation: Any) -> Any:
    """Strip ``Optional[...]`` and ``Annotated[...]`` down to the one type that matters."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _field_by_alias(model: type[BaseModel], alias: str) -> Any:
    for field_name, field in model.model_fields.items():
        if alias in (field.alias, field_name):
            return field
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _shown(value: Any) -> str:
    """A caller's value in a message: strings quoted (at most 64 characters of them), lists and
    objects as compact JSON (at most 256)."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return clip(json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False), MAX_STRUCTURED_CHARS)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())
