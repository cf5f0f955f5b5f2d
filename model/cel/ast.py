"""Typed view of a checked CEL expression, read from and written back to its wire form.

cel-expr-python hands out a compiled expression only as a serialized ``cel.expr.CheckedExpr``
(wrapped in ``google.protobuf.Any``) and accepts one back. This module decodes that into
immutable Python nodes with their checked types, so the rest of the package can estimate
costs, apply DRA-specific checks and rewrite a few constructs, and encodes the result again.

The protobuf schema is declared here field by field (wire-compatible with cel-spec's
``syntax.proto``/``checked.proto``) in a private descriptor pool, so no generated code or
extra package is needed. Fields this module does not use (deprecated constant kinds, source
extensions) survive a round trip as unknown fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "Call",
    "CelType",
    "CheckedAst",
    "Comprehension",
    "Const",
    "CreateList",
    "CreateStruct",
    "Expr",
    "Ident",
    "Select",
    "StructEntry",
    "children",
    "decode_checked",
    "encode_checked",
    "format_location",
]

_CHECKED_EXPR_URL: Final = "type.googleapis.com/cel.expr.CheckedExpr"
_PACKAGE: Final = "drasolver.celast"

_F = descriptor_pb2.FieldDescriptorProto
_OPT: Final = _F.LABEL_OPTIONAL
_REP: Final = _F.LABEL_REPEATED


def _msg(parent: Any, name: str) -> Any:
    return parent.add(name=name)


def _add(message: Any, name: str, number: int, kind: int, *, label: int = _OPT,
         type_name: str = "", oneof: int | None = None) -> None:
    f = message.field.add(name=name, number=number, type=kind, label=label)
    if type_name:
        f.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def _map_entry(parent: Any, name: str, key_kind: int, value_kind: int, value_type: str = "") -> None:
    entry = _msg(parent.nested_type, name)
    entry.options.map_entry = True
    _add(entry, "key", 1, key_kind)
    _add(entry, "value", 2, value_kind, type_name=value_type)


def _schema() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="drasolver/celast.proto", package=_PACKAGE, syntax="proto3")
    m = fdp.message_type
    empty = _msg(m, "Empty")
    del empty  # a message with no fields: google.protobuf.Empty on the wire

    const = _msg(m, "Constant")
    const.oneof_decl.add(name="constant_kind")
    for name, number, kind in (
        ("null_value", 1, _F.TYPE_INT32), ("bool_value", 2, _F.TYPE_BOOL),
        ("int64_value", 3, _F.TYPE_INT64), ("uint64_value", 4, _F.TYPE_UINT64),
        ("double_value", 5, _F.TYPE_DOUBLE), ("string_value", 6, _F.TYPE_STRING),
        ("bytes_value", 7, _F.TYPE_BYTES),
    ):
        _add(const, name, number, kind, oneof=0)

    expr = _msg(m, "Expr")
    ident = _msg(expr.nested_type, "Ident")
    _add(ident, "name", 1, _F.TYPE_STRING)
    select = _msg(expr.nested_type, "Select")
    _add(select, "operand", 1, _F.TYPE_MESSAGE, type_name="Expr")
    _add(select, "field", 2, _F.TYPE_STRING)
    _add(select, "test_only", 3, _F.TYPE_BOOL)
    call = _msg(expr.nested_type, "Call")
    _add(call, "target", 1, _F.TYPE_MESSAGE, type_name="Expr")
    _add(call, "function", 2, _F.TYPE_STRING)
    _add(call, "args", 3, _F.TYPE_MESSAGE, label=_REP, type_name="Expr")
    create_list = _msg(expr.nested_type, "CreateList")
    _add(create_list, "elements", 1, _F.TYPE_MESSAGE, label=_REP, type_name="Expr")
    _add(create_list, "optional_indices", 2, _F.TYPE_INT32, label=_REP)
    create_struct = _msg(expr.nested_type, "CreateStruct")
    entry = _msg(create_struct.nested_type, "Entry")
    entry.oneof_decl.add(name="key_kind")
    _add(entry, "id", 1, _F.TYPE_INT64)
    _add(entry, "field_key", 2, _F.TYPE_STRING, oneof=0)
    _add(entry, "map_key", 3, _F.TYPE_MESSAGE, type_name="Expr", oneof=0)
    _add(entry, "value", 4, _F.TYPE_MESSAGE, type_name="Expr")
    _add(entry, "optional_entry", 5, _F.TYPE_BOOL)
    _add(create_struct, "message_name", 1, _F.TYPE_STRING)
    _add(create_struct, "entries", 2, _F.TYPE_MESSAGE, label=_REP, type_name="Expr.CreateStruct.Entry")
    comp = _msg(expr.nested_type, "Comprehension")
    _add(comp, "iter_var", 1, _F.TYPE_STRING)
    _add(comp, "iter_range", 2, _F.TYPE_MESSAGE, type_name="Expr")
    _add(comp, "accu_var", 3, _F.TYPE_STRING)
    _add(comp, "accu_init", 4, _F.TYPE_MESSAGE, type_name="Expr")
    _add(comp, "loop_condition", 5, _F.TYPE_MESSAGE, type_name="Expr")
    _add(comp, "loop_step", 6, _F.TYPE_MESSAGE, type_name="Expr")
    _add(comp, "result", 7, _F.TYPE_MESSAGE, type_name="Expr")
    _add(comp, "iter_var2", 8, _F.TYPE_STRING)
    expr.oneof_decl.add(name="expr_kind")
    _add(expr, "id", 2, _F.TYPE_INT64)
    for name, number, type_name in (
        ("const_expr", 3, "Constant"), ("ident_expr", 4, "Expr.Ident"),
        ("select_expr", 5, "Expr.Select"), ("call_expr", 6, "Expr.Call"),
        ("list_expr", 7, "Expr.CreateList"), ("struct_expr", 8, "Expr.CreateStruct"),
        ("comprehension_expr", 9, "Expr.Comprehension"),
    ):
        _add(expr, name, number, _F.TYPE_MESSAGE, type_name=type_name, oneof=0)

    source = _msg(m, "SourceInfo")
    _add(source, "syntax_version", 1, _F.TYPE_STRING)
    _add(source, "location", 2, _F.TYPE_STRING)
    _add(source, "line_offsets", 3, _F.TYPE_INT32, label=_REP)
    _map_entry(source, "PositionsEntry", _F.TYPE_INT64, _F.TYPE_INT32)
    _add(source, "positions", 4, _F.TYPE_MESSAGE, label=_REP, type_name="SourceInfo.PositionsEntry")
    _map_entry(source, "MacroCallsEntry", _F.TYPE_INT64, _F.TYPE_MESSAGE, "Expr")
    _add(source, "macro_calls", 5, _F.TYPE_MESSAGE, label=_REP, type_name="SourceInfo.MacroCallsEntry")

    typ = _msg(m, "Type")
    lt = _msg(typ.nested_type, "ListType")
    _add(lt, "elem_type", 1, _F.TYPE_MESSAGE, type_name="Type")
    mt = _msg(typ.nested_type, "MapType")
    _add(mt, "key_type", 1, _F.TYPE_MESSAGE, type_name="Type")
    _add(mt, "value_type", 2, _F.TYPE_MESSAGE, type_name="Type")
    ft = _msg(typ.nested_type, "FunctionType")
    _add(ft, "result_type", 1, _F.TYPE_MESSAGE, type_name="Type")
    _add(ft, "arg_types", 2, _F.TYPE_MESSAGE, label=_REP, type_name="Type")
    at = _msg(typ.nested_type, "AbstractType")
    _add(at, "name", 1, _F.TYPE_STRING)
    _add(at, "parameter_types", 2, _F.TYPE_MESSAGE, label=_REP, type_name="Type")
    typ.oneof_decl.add(name="type_kind")
    for name, number, kind, type_name in (
        ("dyn", 1, _F.TYPE_MESSAGE, "Empty"), ("null", 2, _F.TYPE_INT32, ""),
        ("primitive", 3, _F.TYPE_INT32, ""), ("wrapper", 4, _F.TYPE_INT32, ""),
        ("well_known", 5, _F.TYPE_INT32, ""), ("list_type", 6, _F.TYPE_MESSAGE, "Type.ListType"),
        ("map_type", 7, _F.TYPE_MESSAGE, "Type.MapType"),
        ("function", 8, _F.TYPE_MESSAGE, "Type.FunctionType"),
        ("message_type", 9, _F.TYPE_STRING, ""), ("type_param", 10, _F.TYPE_STRING, ""),
        ("type", 11, _F.TYPE_MESSAGE, "Type"), ("error", 12, _F.TYPE_MESSAGE, "Empty"),
        ("abstract_type", 14, _F.TYPE_MESSAGE, "Type.AbstractType"),
    ):
        _add(typ, name, number, kind, type_name=type_name, oneof=0)

    ref = _msg(m, "Reference")
    _add(ref, "name", 1, _F.TYPE_STRING)
    _add(ref, "overload_id", 3, _F.TYPE_STRING, label=_REP)
    _add(ref, "value", 4, _F.TYPE_MESSAGE, type_name="Constant")

    checked = _msg(m, "CheckedExpr")
    _map_entry(checked, "ReferenceMapEntry", _F.TYPE_INT64, _F.TYPE_MESSAGE, "Reference")
    _map_entry(checked, "TypeMapEntry", _F.TYPE_INT64, _F.TYPE_MESSAGE, "Type")
    _add(checked, "reference_map", 2, _F.TYPE_MESSAGE, label=_REP, type_name="CheckedExpr.ReferenceMapEntry")
    _add(checked, "type_map", 3, _F.TYPE_MESSAGE, label=_REP, type_name="CheckedExpr.TypeMapEntry")
    _add(checked, "expr", 4, _F.TYPE_MESSAGE, type_name="Expr")
    _add(checked, "source_info", 5, _F.TYPE_MESSAGE, type_name="SourceInfo")
    _add(checked, "expr_version", 6, _F.TYPE_STRING)
    return fdp


def _checked_expr_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_schema())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.CheckedExpr"))


# Generated once at import and never changed afterwards: a constant, not shared state.
_CHECKED_EXPR: Final[Any] = _checked_expr_class()


# --- nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CelType:
    """A checked type. ``kind`` is one of: dyn, null, bool, int, uint, double, string,
    bytes, any, timestamp, duration, wrapper, list, map, function, message, type_param,
    type, error, abstract."""

    kind: str
    name: str = ""
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        """cel-go's ``Type.String()`` spelling (what upstream's compile errors print)."""
        if self.kind in ("message", "type_param"):
            return self.name
        if self.kind == "list":
            return f"list({self.params[0]})"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})"
        if self.kind == "null":
            return "null_type"
        if self.kind == "any":
            return "google.protobuf.Any"
        if self.kind == "timestamp":
            return "google.protobuf.Timestamp"
        if self.kind == "duration":
            return "google.protobuf.Duration"
        if self.kind == "wrapper":
            return f"wrapper({self.params[0]})"
        if self.kind == "type":
            return f"type({self.params[0]})" if self.params else "type"
        if self.kind == "abstract":
            inner = ", ".join(str(p) for p in self.params)
            return f"{self.name}({inner})" if self.params else self.name
        if self.kind == "error":
            return "*error*"
        return self.kind

    def is_dyn_like(self) -> bool:
        return self.kind in ("dyn", "any", "error", "type_param")


DYN: Final = CelType("dyn")


@dataclass(frozen=True, slots=True)
class Const:
    id: int
    kind: str  # null, bool, int, uint, double, string, bytes
    value: object


@dataclass(frozen=True, slots=True)
class Ident:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    id: int
    operand: Expr
    field: str
    test_only: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    id: int
    function: str
    target: Expr | None
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class CreateList:
    id: int
    elements: tuple[Expr, ...]
    optional_indices: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StructEntry:
    id: int
    field_key: str | None
    map_key: Expr | None
    value: Expr
    optional: bool = False


@dataclass(frozen=True, slots=True)
class CreateStruct:
    """A map literal when ``message_name`` is empty, else a message construction."""

    id: int
    message_name: str
    entries: tuple[StructEntry, ...]


@dataclass(frozen=True, slots=True)
class Comprehension:
    id: int
    iter_var: str
    iter_var2: str
    iter_range: Expr
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr


Expr = Const | Ident | Select | Call | CreateList | CreateStruct | Comprehension


def children(e: Expr) -> Iterator[Expr]:
    """Direct sub-expressions in evaluation order."""
    if isinstance(e, Select):
        yield e.operand
    elif isinstance(e, Call):
        if e.target is not None:
            yield e.target
        yield from e.args
    elif isinstance(e, CreateList):
        yield from e.elements
    elif isinstance(e, CreateStruct):
        for entry in e.entries:
            if entry.map_key is not None:
                yield entry.map_key
            yield entry.value
    elif isinstance(e, Comprehension):
        yield from (e.iter_range, e.accu_init, e.loop_condition, e.loop_step, e.result)


@dataclass(frozen=True)
class Reference:
    name: str
    overload_ids: tuple[str, ...]


@dataclass
class CheckedAst:
    """A checked expression: the tree plus the checker's side tables."""

    expr: Expr
    types: dict[int, CelType]
    references: dict[int, Reference]
    positions: dict[int, int]
    source: str
    _raw: Any = field(default=None, repr=False)  # the decoded message, for a faithful re-encode

    def type_of(self, e: Expr) -> CelType:
        return self.types.get(e.id, DYN)

    def overloads(self, e: Expr) -> tuple[str, ...]:
        ref = self.references.get(e.id)
        return ref.overload_ids if ref else ()

    def max_id(self) -> int:
        best = 0
        stack: list[Expr] = [self.expr]
        while stack:
            e = stack.pop()
            best = max(best, e.id)
            if isinstance(e, CreateStruct):
                best = max([best, *(entry.id for entry in e.entries)])
            stack.extend(children(e))
        return best

    def location(self, expr_id: int) -> tuple[int, int]:
        """(line, column), both 1-based, of an expression like cel-go prints it."""
        offset = self.positions.get(expr_id, 0)
        return _line_col(self.source, offset)


def _line_col(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    start = source.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def format_location(source: str, line: int, col: int, message: str) -> str:
    """One error the way cel-go's ``Issues.String()`` renders it, with the source snippet."""
    lines = source.split("\n")
    text = f"ERROR: <input>:{line}:{col}: {message}"
    if 0 < line <= len(lines):
        snippet = lines[line - 1].replace("\t", " ")
        text += f"\n | {snippet}\n | {'.' * (col - 1)}^"
    return text


# --- decoding ------------------------------------------------------------------------------

_PRIMITIVES: Final = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN: Final = {1: "any", 2: "timestamp", 3: "duration"}


def _decode_type(t: Any) -> CelType:
    kind = t.WhichOneof("type_kind")
    if kind == "primitive":
        return CelType(_PRIMITIVES.get(t.primitive, "dyn"))
    if kind == "list_type":
        return CelType("list", params=(_decode_type(t.list_type.elem_type),))
    if kind == "map_type":
        return CelType("map", params=(_decode_type(t.map_type.key_type), _decode_type(t.map_type.value_type)))
    if kind == "message_type":
        return CelType("message", t.message_type)
    if kind == "well_known":
        return CelType(_WELL_KNOWN.get(t.well_known, "dyn"))
    if kind == "null":
        return CelType("null")
    if kind == "wrapper":
        return CelType("wrapper", params=(CelType(_PRIMITIVES.get(t.wrapper, "dyn")),))
    if kind == "type_param":
        return CelType("type_param", t.type_param)
    if kind == "type":
        inner = t.type
        return CelType("type", params=(_decode_type(inner),) if inner.WhichOneof("type_kind") else ())
    if kind == "abstract_type":
        return CelType("abstract", t.abstract_type.name, tuple(_decode_type(p) for p in t.abstract_type.parameter_types))
    if kind == "function":
        return CelType("function")
    if kind == "error":
        return CelType("error")
    return DYN


def _decode_const(c: Any, expr_id: int) -> Const:
    kind = c.WhichOneof("constant_kind")
    if kind == "bool_value":
        return Const(expr_id, "bool", c.bool_value)
    if kind == "int64_value":
        return Const(expr_id, "int", c.int64_value)
    if kind == "uint64_value":
        return Const(expr_id, "uint", c.uint64_value)
    if kind == "double_value":
        return Const(expr_id, "double", c.double_value)
    if kind == "string_value":
        return Const(expr_id, "string", c.string_value)
    if kind == "bytes_value":
        return Const(expr_id, "bytes", bytes(c.bytes_value))
    return Const(expr_id, "null", None)


def _decode_expr(e: Any) -> Expr:
    kind = e.WhichOneof("expr_kind")
    if kind == "const_expr":
        return _decode_const(e.const_expr, e.id)
    if kind == "ident_expr":
        return Ident(e.id, e.ident_expr.name)
    if kind == "select_expr":
        s = e.select_expr
        return Select(e.id, _decode_expr(s.operand), s.field, s.test_only)
    if kind == "call_expr":
        c = e.call_expr
        target = _decode_expr(c.target) if c.HasField("target") else None
        return Call(e.id, c.function, target, tuple(_decode_expr(a) for a in c.args))
    if kind == "list_expr":
        lst = e.list_expr
        return CreateList(e.id, tuple(_decode_expr(x) for x in lst.elements), tuple(lst.optional_indices))
    if kind == "struct_expr":
        s = e.struct_expr
        entries = tuple(
            StructEntry(
                en.id,
                en.field_key if en.WhichOneof("key_kind") == "field_key" else None,
                _decode_expr(en.map_key) if en.WhichOneof("key_kind") == "map_key" else None,
                _decode_expr(en.value),
                en.optional_entry,
            )
            for en in s.entries
        )
        return CreateStruct(e.id, s.message_name, entries)
    if kind == "comprehension_expr":
        c = e.comprehension_expr
        return Comprehension(
            e.id, c.iter_var, c.iter_var2, _decode_expr(c.iter_range), c.accu_var,
            _decode_expr(c.accu_init), _decode_expr(c.loop_condition),
            _decode_expr(c.loop_step), _decode_expr(c.result),
        )
    return Const(e.id, "null", None)


def decode_checked(serialized: bytes, source: str) -> CheckedAst:
    """Decode what ``cel_expr_python``'s ``Expression.serialize()`` returns."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    raw = _CHECKED_EXPR()
    raw.ParseFromString(wrapper.value)
    types = {k: _decode_type(v) for k, v in raw.type_map.items()}
    refs = {k: Reference(v.name, tuple(v.overload_id)) for k, v in raw.reference_map.items()}
    positions = dict(raw.source_info.positions.items())
    return CheckedAst(_decode_expr(raw.expr), types, refs, positions, source, raw)


# --- encoding ------------------------------------------------------------------------------


def _encode_const(c: Const, out: Any) -> None:
    if c.kind == "bool":
        out.bool_value = bool(c.value)
    elif c.kind == "int":
        out.int64_value = int(c.value)  # type: ignore[call-overload]
    elif c.kind == "uint":
        out.uint64_value = int(c.value)  # type: ignore[call-overload]
    elif c.kind == "double":
        out.double_value = float(c.value)  # type: ignore[arg-type]
    elif c.kind == "string":
        out.string_value = str(c.value)
    elif c.kind == "bytes":
        out.bytes_value = bytes(c.value)  # type: ignore[call-overload]
    else:
        out.null_value = 0


def _encode_expr(e: Expr, out: Any) -> None:
    out.id = e.id
    if isinstance(e, Const):
        _encode_const(e, out.const_expr)
    elif isinstance(e, Ident):
        out.ident_expr.name = e.name
    elif isinstance(e, Select):
        _encode_expr(e.operand, out.select_expr.operand)
        out.select_expr.field = e.field
        out.select_expr.test_only = e.test_only
    elif isinstance(e, Call):
        out.call_expr.function = e.function
        if e.target is not None:
            _encode_expr(e.target, out.call_expr.target)
        for a in e.args:
            _encode_expr(a, out.call_expr.args.add())
    elif isinstance(e, CreateList):
        out.list_expr.SetInParent()
        for x in e.elements:
            _encode_expr(x, out.list_expr.elements.add())
        out.list_expr.optional_indices.extend(e.optional_indices)
    elif isinstance(e, CreateStruct):
        out.struct_expr.SetInParent()
        out.struct_expr.message_name = e.message_name
        for entry in e.entries:
            en = out.struct_expr.entries.add()
            en.id = entry.id
            if entry.field_key is not None:
                en.field_key = entry.field_key
            elif entry.map_key is not None:
                _encode_expr(entry.map_key, en.map_key)
            _encode_expr(entry.value, en.value)
            en.optional_entry = entry.optional
    else:
        c = out.comprehension_expr
        c.iter_var = e.iter_var
        c.iter_var2 = e.iter_var2
        c.accu_var = e.accu_var
        _encode_expr(e.iter_range, c.iter_range)
        _encode_expr(e.accu_init, c.accu_init)
        _encode_expr(e.loop_condition, c.loop_condition)
        _encode_expr(e.loop_step, c.loop_step)
        _encode_expr(e.result, c.result)


def encode_checked(ast: CheckedAst, expr: Expr, *, drop_references: set[int]) -> bytes:
    """Serialize ``expr`` with ``ast``'s side tables, minus references of rewritten nodes
    (their function changed, so the checker's overload ids no longer apply)."""
    raw = _CHECKED_EXPR()
    raw.CopyFrom(ast._raw)
    for expr_id in drop_references:
        if expr_id in raw.reference_map:
            del raw.reference_map[expr_id]
    raw.ClearField("expr")
    _encode_expr(expr, raw.expr)
    wrapper = any_pb2.Any(type_url=_CHECKED_EXPR_URL, value=raw.SerializeToString())
    return wrapper.SerializeToString()
