"""The CP-SAT model's device choice variables, keyed by the domain's own names.

API:
- ``DeviceChoiceVars``: the literal "this device serves this request or subrequest", one per
  eligible pair, keyed by ``RequestKey`` and ``DeviceID``:
  ``chosen(request_key, device_id)`` gives it (None for a pair that is not eligible);
  ``of_option(key)`` an option's (candidate, literal) pairs and ``of_device(id)`` a device's
  (option, literal) pairs, both in upstream's search order; ``candidates()`` every candidate
  with a literal, in search order; ``extract(solver)`` the chosen candidates per option.
  ``add_use(option, candidate, var, scope=...)`` and ``claim_of(option)``: a shared build's
  store, by device across instances.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ortools.sat.python import cp_model

from dra_solver.model.cluster import DeviceID
from dra_solver.model.cpsat.problem import Candidate, OptionData
from dra_solver.model.matching import RequestKey


class DeviceChoiceVars:
    """The literals "candidate d serves option o", keyed by option and device."""

    def __init__(self) -> None:
        self._vars: dict[RequestKey, dict[DeviceID, Any]] = {}
        self._by_device: dict[DeviceID, list[tuple[OptionData, Any]]] = defaultdict(list)
        self._candidates: dict[DeviceID, Candidate] = {}
        self._scopes: dict[int, str] = {}

    def add_use(self, option: OptionData, candidate: Candidate, var: Any, *, scope: str) -> None:
        """A shared build's store (``model.cpsat.model.SharedBuild``): the literal by device
        only, its option marked with the instance it belongs to (``claim_of``)."""
        self._by_device[candidate.id].append((option, var))
        self._candidates[candidate.id] = candidate
        self._scopes[id(option)] = scope

    def claim_of(self, option: OptionData) -> tuple[str, int]:
        """The claim an option belongs to: its instance (shared builds) and claim index."""
        return self._scopes.get(id(option), ""), option.key.claim

    def add(self, option: OptionData, candidate: Candidate, var: Any) -> None:
        self._vars.setdefault(option.key, {})[candidate.id] = var
        self._by_device[candidate.id].append((option, var))
        self._candidates[candidate.id] = candidate

    def chosen(self, request: RequestKey, device: DeviceID) -> cp_model.IntVar | None:
        """The literal "``device`` serves this request or subrequest", if the pair is eligible."""
        var: cp_model.IntVar | None = self._vars.get(request, {}).get(device)
        return var

    def of_option(self, key: RequestKey) -> list[tuple[Candidate, Any]]:
        """The option's candidates and their literals, in search order."""
        pairs = [(self._candidates[dev], var) for dev, var in self._vars.get(key, {}).items()]
        return sorted(pairs, key=lambda pair: pair[0].index)

    def literals(self, key: RequestKey) -> list[Any]:
        """The option's literals in the order they were made."""
        return list(self._vars.get(key, {}).values())

    def of_device(self, device: DeviceID) -> list[tuple[OptionData, Any]]:
        return self._by_device.get(device, [])

    def candidates(self) -> list[Candidate]:
        """Every candidate that serves some option, in search order."""
        return sorted(self._candidates.values(), key=lambda c: c.index)

    def extract(self, solver: cp_model.CpSolver) -> dict[RequestKey, tuple[Candidate, ...]]:
        """Chosen candidates per option, in search order."""
        return {
            key: tuple(c for c, var in self.of_option(key) if solver.boolean_value(var))
            for key in self._vars
        }

    def __len__(self) -> int:
        return sum(len(by) for by in self._vars.values())
