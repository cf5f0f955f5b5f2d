"""Which device attributes a checked selector can read: its read set.

API:
- ``attribute_reads(ast) -> frozenset[tuple[str, str]] | None``: the ``(domain, name)`` pairs
  of ``device.attributes`` the expression reads (a value or its presence), or None (``ALL``)
  when it may read any attribute.

Why: nodes whose devices differ only in attributes no selector reads (a per-GPU UUID, a serial
number, a PCI address) give every claim the same answer, so whole-cluster scheduling solves one
of them for all (``model.node_state``). That is only sound if the read set is never too small,
so the analysis is deliberately narrow: it proves reads only for the shapes it knows and says
``ALL`` for anything else.

Known shapes, over the checked AST (``model.cel.ast``; the checker resolves
``device.attributes`` to one identifier):
- a domain map with a constant domain: ``device.attributes["d"]``, ``device.attributes.d``,
  ``device.attributes[?"d"]`` and ``device.attributes.?d``;
- an attribute of a domain map with a constant name: ``.x``, ``["x"]``, ``[?"x"]``, ``.?x``
  and ``has(....x)`` (a presence read of the same attribute);
- ``has(device.attributes.d)``: always true at runtime (``model.cel.rewrite``), reads nothing.

Everything else that touches ``device.attributes`` (iterating it, ``size()``, ``in``, binding a
domain map to a variable, indexing with a computed key) makes the answer ``ALL``.
"""

from __future__ import annotations

from typing import Final

from dra_solver.model.cel.ast import Call, CheckedAst, Const, Expr, Ident, Select, children

__all__ = ["ALL", "AttributeReads", "attribute_reads"]

AttributeReads = frozenset[tuple[str, str]] | None
"""``(domain, name)`` pairs, or None: any attribute."""

ALL: Final = None

_ATTRIBUTES: Final = "device.attributes"
_INDEX: Final = frozenset({"_[_]", "_[?_]", "_?._"})


def _constant_key(e: Call) -> str | None:
    if e.function in _INDEX and len(e.args) == 2 and isinstance(e.args[1], Const) and e.args[1].kind == "string":
        value = e.args[1].value
        return value if isinstance(value, str) else None
    return None


def _domain(e: Expr) -> str | None:
    """The constant domain of a domain-map expression (``device.attributes["d"]``), or None."""
    if isinstance(e, Select) and not e.test_only and isinstance(e.operand, Ident) and e.operand.name == _ATTRIBUTES:
        return e.field
    if isinstance(e, Call) and e.args and isinstance(e.args[0], Ident) and e.args[0].name == _ATTRIBUTES:
        return _constant_key(e)
    return None


def _attribute(e: Expr) -> tuple[str, str] | None:
    """``(domain, name)`` when ``e`` reads one attribute of a constant domain map."""
    if isinstance(e, Select):
        domain = _domain(e.operand)
        return (domain, e.field) if domain is not None else None
    if isinstance(e, Call) and e.args:
        domain = _domain(e.args[0])
        name = _constant_key(e)
        if domain is not None and name is not None:
            return domain, name
    return None


def attribute_reads(ast: CheckedAst) -> AttributeReads:
    """The attributes the expression can read (see the module docstring), or ``ALL``."""
    reads: set[tuple[str, str]] = set()
    stack: list[Expr] = [ast.expr]
    while stack:
        e = stack.pop()
        found = _attribute(e)
        if found is not None:
            reads.add(found)
            continue  # its operands are the domain map and constants
        if isinstance(e, Select) and e.test_only and isinstance(e.operand, Ident) and e.operand.name == _ATTRIBUTES:
            continue  # has(device.attributes.d): true whatever the device has
        if _domain(e) is not None:
            return ALL  # a whole domain map used some other way
        if isinstance(e, Ident) and e.name == _ATTRIBUTES:
            return ALL  # the map of domains itself: iterated, sized, tested with "in", ...
        stack.extend(children(e))
    return frozenset(reads)
