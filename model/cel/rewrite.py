"""DRA-specific checks and rewrites of a checked expression.

Checks (compile errors upstream's environment reports but a generic checker does not):
the result must be ``bool`` or the attribute type; list and map literals must be
homogeneous (Kubernetes' ``HomogeneousAggregateLiterals``); the hidden representation of
Quantity, Semver and the device must stay hidden.

Rewrites (runtime semantics upstream gets from its own Go types):

* ``device.attributes[d]`` and ``device.capacity[d]``: a domain the device does not have is
  an empty map upstream (its map wrapper's ``Find`` never fails), while ``d in
  device.attributes``, iteration and ``size()`` see only the real domains. Lookups become
  ``m[?d].orValue({})``, ``has(m.d)`` becomes ``true``, every other use is left alone.
* ``==``, ``!=`` and ``in`` on quantities compare by value (``1000m == 1``), not by the
  message's representation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

from dra_solver.model.cel.api import CelFeatures
from dra_solver.model.cel.ast import (
    Call,
    CelType,
    CheckedAst,
    Comprehension,
    Const,
    CreateList,
    CreateStruct,
    Expr,
    Ident,
    Select,
    StructEntry,
    children,
    format_location,
)
from dra_solver.model.cel.declarations import DEVICE_TYPE, HIDDEN_TYPES, QUANTITY_TYPE

__all__ = ["QUANTITY_EQUALS", "QUANTITY_IN", "check", "rewrite_for_runtime"]

DEVICE_MAPS: Final = frozenset({"device.attributes", "device.capacity"})
QUANTITY_EQUALS: Final = "@dra_quantity_equals"
QUANTITY_IN: Final = "@dra_quantity_in"
# Opaque upstream: no fields to select (the device's fields are declared ones and stay usable).
_OPAQUE: Final = HIDDEN_TYPES - {DEVICE_TYPE}


# --- checks --------------------------------------------------------------------------------


def _assignable(a: CelType, b: CelType) -> bool:
    if a.is_dyn_like() or b.is_dyn_like():
        return True
    if a.kind != b.kind or a.name != b.name or len(a.params) != len(b.params):
        return False
    return all(_assignable(x, y) for x, y in zip(a.params, b.params, strict=True))


def _element_type(ast: CheckedAst, e: Expr, *, optional: bool) -> CelType:
    t = ast.type_of(e)
    if optional and t.kind == "abstract" and t.name == "optional_type" and t.params:
        return t.params[0]
    return t


def _homogeneous(ast: CheckedAst, items: list[tuple[Expr, bool]]) -> tuple[Expr, CelType, CelType] | None:
    joined: CelType | None = None
    for e, optional in items:
        t = _element_type(ast, e, optional=optional)
        if joined is None or t.is_dyn_like():
            joined = t  # the more general type (cel-go's mostGeneral): dyn stays dyn
        elif not joined.is_dyn_like() and not _assignable(joined, t):
            return e, joined, t
    return None


def _error(ast: CheckedAst, e: Expr, message: str) -> str:
    line, col = ast.location(e.id)
    return format_location(ast.source, line, col, message)


def check(ast: CheckedAst, features: CelFeatures) -> str | None:
    """The first DRA-specific compile error, formatted like upstream's, or None."""
    issues: list[str] = []
    stack: list[Expr] = [ast.expr]
    while stack:
        e = stack.pop()
        if isinstance(e, CreateStruct) and e.message_name in HIDDEN_TYPES:
            issues.append(_error(ast, e, f"undeclared reference to '{e.message_name}' (in container '')"))
        elif isinstance(e, Select) and ast.type_of(e.operand).name in _OPAQUE:
            issues.append(_error(ast, e, f"undefined field '{e.field}'"))
        elif (
            isinstance(e, Call) and e.function == "_?._" and len(e.args) == 2
            and ast.type_of(e.args[0]).name in _OPAQUE and isinstance(e.args[1], Const)
        ):
            issues.append(_error(ast, e, f"undefined field '{e.args[1].value}'"))
        elif isinstance(e, CreateList):
            mismatch = _homogeneous(ast, [(x, i in e.optional_indices) for i, x in enumerate(e.elements)])
            if mismatch:
                where, want, got = mismatch
                issues.append(_error(ast, where, f"expected type '{want}' but found '{got}'"))
        elif isinstance(e, CreateStruct) and not e.message_name:
            keys = _homogeneous(ast, [(en.map_key, False) for en in e.entries if en.map_key is not None])
            values = _homogeneous(ast, [(en.value, en.optional) for en in e.entries])
            for mismatch in (keys, values):
                if mismatch:
                    where, want, got = mismatch
                    issues.append(_error(ast, where, f"expected type '{want}' but found '{got}'"))
        stack.extend(children(e))
    if issues:
        return "compilation failed: " + "\n".join(sorted(issues))
    result = ast.type_of(ast.expr)
    unknown = "dyn" if features.list_type_attributes else "any"
    if result.kind not in ("bool", unknown):
        return f"must evaluate to bool or the unknown type, not {result}"
    return None


# --- rewrites ------------------------------------------------------------------------------


@dataclass
class _Rewriter:
    ast: CheckedAst
    next_id: int
    rewritten: set[int] = field(default_factory=set)

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def is_device_map(self, e: Expr) -> bool:
        return isinstance(e, Ident) and e.name in DEVICE_MAPS

    def is_quantity(self, e: Expr) -> bool:
        t = self.ast.type_of(e)
        return t.kind == "message" and t.name == QUANTITY_TYPE

    def lookup(self, node_id: int, device_map: Expr, key: Expr) -> Expr:
        """``m[?key].orValue({})`` under the id of the node it replaces."""
        self.rewritten.add(node_id)
        optional = Call(self.fresh(), "_[?_]", None, (device_map, key))
        return Call(node_id, "orValue", optional, (CreateStruct(self.fresh(), "", ()),))

    def visit(self, e: Expr) -> Expr:
        if isinstance(e, Select) and self.is_device_map(e.operand):
            if e.test_only:
                self.rewritten.add(e.id)
                return Const(e.id, "bool", True)
            return self.lookup(e.id, e.operand, Const(self.fresh(), "string", e.field))
        if isinstance(e, Call):
            return self.visit_call(e)
        if isinstance(e, Select):
            return replace(e, operand=self.visit(e.operand))
        if isinstance(e, CreateList):
            return replace(e, elements=tuple(self.visit(x) for x in e.elements))
        if isinstance(e, CreateStruct):
            return replace(e, entries=tuple(
                StructEntry(
                    en.id, en.field_key,
                    self.visit(en.map_key) if en.map_key is not None else None,
                    self.visit(en.value), en.optional,
                )
                for en in e.entries
            ))
        if isinstance(e, Comprehension):
            return replace(
                e,
                iter_range=self.visit(e.iter_range),
                accu_init=self.visit(e.accu_init),
                loop_condition=self.visit(e.loop_condition),
                loop_step=self.visit(e.loop_step),
                result=self.visit(e.result),
            )
        return e

    def visit_call(self, e: Call) -> Expr:
        args = e.args
        if e.function == "_[_]" and len(args) == 2 and self.is_device_map(args[0]):
            return self.lookup(e.id, args[0], self.visit(args[1]))
        if e.function in ("_[?_]", "_?._") and len(args) == 2 and self.is_device_map(args[0]):
            inner = self.lookup(self.fresh(), args[0], self.visit(args[1]))
            self.rewritten.add(e.id)
            return Call(e.id, "optional.of", None, (inner,))
        if e.function in ("_==_", "_!=_") and len(args) == 2 and all(self.is_quantity(a) for a in args):
            self.rewritten.add(e.id)
            equals = Call(self.fresh() if e.function == "_!=_" else e.id, QUANTITY_EQUALS, None,
                          tuple(self.visit(a) for a in args))
            return equals if e.function == "_==_" else Call(e.id, "!_", None, (equals,))
        if e.function == "@in" and len(args) == 2 and self.is_quantity(args[0]):
            container = self.ast.type_of(args[1])
            if container.kind == "list" and container.params and container.params[0].name == QUANTITY_TYPE:
                self.rewritten.add(e.id)
                return Call(e.id, QUANTITY_IN, None, tuple(self.visit(a) for a in args))
        target = self.visit(e.target) if e.target is not None else None
        return replace(e, target=target, args=tuple(self.visit(a) for a in args))


def rewrite_for_runtime(ast: CheckedAst) -> tuple[Expr, set[int]]:
    """The expression with DRA runtime semantics made explicit, and the ids of rewritten
    nodes (whose checker references no longer apply)."""
    rewriter = _Rewriter(ast, ast.max_id())
    expr = rewriter.visit(ast.expr)
    return expr, rewriter.rewritten
