"""``FlightNodes`` (model.flight_order): the nodes in flight as of one call, made from the one
before by re-keying a node; each equals the same nodes sorted from scratch, across the new
bases it makes, and an earlier one never changes."""

from __future__ import annotations

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from dra_solver.model.flight_order import FlightNodes, OrderKey

NAMES = [f"node-{i:03}" for i in range(150)]

some_key = st.tuples(st.integers(0, 1), st.integers(-80, 80).map(lambda i: i / 10), st.just(""))
keys = st.one_of(st.none(), some_key, some_key)
# Enough steps on enough names that more re-keyed nodes than a base keeps apart (about the
# square root of its size, at least 8) are passed, and new bases are made.
steps = st.lists(st.tuples(st.integers(0, len(NAMES) - 1), keys), min_size=150, max_size=400)


def _expected(model: dict[str, OrderKey]) -> list[tuple[OrderKey, str]]:
    return sorted((k, n) for n, k in model.items())


# No shrinking: long sequences shrink slowly; the failing step's number is in the assertion.
@settings(max_examples=40, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(st.dictionaries(st.sampled_from(NAMES), some_key, max_size=80), steps)
def test_re_keyed_nodes_equal_the_same_nodes_sorted_from_scratch(start: dict[str, OrderKey], ops: list[tuple[int, OrderKey | None]]) -> None:
    model = dict(start)
    nodes = FlightNodes.of(dict(model))
    kept: list[tuple[FlightNodes, list[tuple[OrderKey, str]]]] = []
    for step, (at, key) in enumerate(ops):
        name = NAMES[at]
        full = None if key is None else (key[0], key[1], name)  # node_key ends with the node's name
        nodes = nodes.with_key(name, full)
        if full is None:
            model.pop(name, None)
        else:
            model[name] = full
        assert list(nodes) == _expected(model), step
        assert len(nodes) == len(model), step
        assert [n for n in NAMES if n in nodes] == sorted(model), step
        assert all(nodes.key(n) == model.get(n) for n in NAMES), step
        if step % 50 == 0:
            kept.append((nodes, list(nodes)))
    for earlier, listed in kept:
        assert list(earlier) == listed
