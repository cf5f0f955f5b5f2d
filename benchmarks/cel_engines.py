"""Microseconds per CEL selector evaluation, per engine (not a test: run it by hand).

    python benchmarks/cel_engines.py [--n 20000]

For each engine it prints the cost of a raw evaluation (match cache bypassed), of a cached
match, of building a device's activation, and of compiling. cel-python (import name
``celpy``), when installed with ``pip install cel-python``, is timed on the selectors it can
express (no Kubernetes functions, no cel.bind, no optional chaining) for comparison.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dra_solver.model.cel import ENGINES, CelDevice, CelEnvironment
from dra_solver.model.quantity import parse_quantity
from dra_solver.model.semver import parse_semver

DEVICE = CelDevice(
    "gpu.example.com",
    {
        "model": "A100-SXM4-40GB",
        "index": 2,
        "rdma": True,
        "driverVersion": parse_semver("550.54.15"),
        "ids": (1, 2, 3),
        "resource.kubernetes.io/pcieRoot": "pci0000:00",
    },
    {"memory": parse_quantity("40Gi"), "multiprocessors": parse_quantity("108")},
    False,
)

SELECTORS = {
    "driver ==": 'device.driver == "gpu.example.com"',
    "attribute ==": 'device.attributes["gpu.example.com"].model == "A100-SXM4-40GB"',
    "two attributes &&": 'device.attributes["gpu.example.com"].rdma && device.attributes["gpu.example.com"].index < 4',
    "quantity compareTo": 'device.capacity["gpu.example.com"].memory.compareTo(quantity("10Gi")) >= 0',
    "semver isGreaterThan": 'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("535.0.0"))',
    "lowerAscii.matches": "device.attributes['gpu.example.com'].model.lowerAscii().matches('^.*a100.*$')",
    "list includes": 'device.attributes["gpu.example.com"].ids.includes(2)',
    "cel.bind": 'cel.bind(g, device.attributes["gpu.example.com"], g.index == 2 && g.rdma)',
}

CELPY_SELECTORS = {
    "driver ==": 'device.driver == "gpu.example.com"',
    "attribute ==": 'device.attributes["gpu.example.com"].model == "A100-SXM4-40GB"',
    "two attributes &&": 'device.attributes["gpu.example.com"].rdma && device.attributes["gpu.example.com"].index < 4',
    "lowerAscii.matches": "device.attributes['gpu.example.com'].model.matches('^.*A100.*$')",
}


def per_call(fn: Callable[[], object], n: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def bench_engine(engine: str, n: int) -> None:
    env = CelEnvironment(engine=engine)
    evaluate: Callable[..., bool] = env._engine.evaluate
    print(f"\n== {engine}")
    for name, expression in SELECTORS.items():
        selector = env.compile(expression)
        program = selector.program  # type: ignore[attr-defined]
        raw = per_call(functools.partial(evaluate, program, DEVICE), n)
        cached = per_call(functools.partial(selector.matches, DEVICE), n)
        print(f"  {name:22} eval {raw:7.2f} us   cached match {cached:5.2f} us")
    program = env.compile(SELECTORS["attribute =="]).program  # type: ignore[attr-defined]
    serials = iter(range(10**9))

    def fresh_device() -> bool:
        attributes = {**DEVICE.attributes, "serial": next(serials)}
        return evaluate(program, CelDevice(DEVICE.driver, attributes, DEVICE.capacity))

    fresh = per_call(fresh_device, max(n // 10, 100))
    print(f"  {'new device':22} eval {fresh:7.2f} us   (activation built each time)")
    compiles = iter(range(10**9))

    def compile_one() -> object:
        return env._engine.compile(f'device.attributes["gpu.example.com"].index == {next(compiles)}')

    compile_us = per_call(compile_one, max(n // 100, 50))
    print(f"  {'compile':22} {compile_us / 1000:7.3f} ms")


def bench_celpy(n: int) -> None:
    try:
        import celpy
    except ImportError:
        print("\n== cel-python: not installed (pip install cel-python to compare)")
        return
    print("\n== cel-python (celpy)")
    env = celpy.Environment()
    activation = {
        "device": celpy.json_to_cel({
            "driver": DEVICE.driver,
            "attributes": {"gpu.example.com": {"model": "A100-SXM4-40GB", "index": 2, "rdma": True}},
        })
    }
    for name, expression in CELPY_SELECTORS.items():
        program = env.program(env.compile(expression))
        us = per_call(functools.partial(program.evaluate, activation), max(n // 20, 200))
        print(f"  {name:22} eval {us:7.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="evaluations per selector")
    args = parser.parse_args()
    for engine in ENGINES:
        bench_engine(engine, args.n)
    bench_celpy(args.n)


if __name__ == "__main__":
    main()
