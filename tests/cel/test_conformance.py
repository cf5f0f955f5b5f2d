"""The CEL conformance table: expression x device -> result, runtime error or compile error.

Rows named ``upstream/...`` are the cases of k8s.io/dynamic-resource-allocation's
``cel/compile_test.go`` (same expression, device, outcome and worst-case cost); the others
cover every function of the DRA environment, the error semantics and the feature gates.
Every engine runs the whole table; an engine that cannot run a row skips it with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from dra_solver.model.cel import (
    CEL_COST_LIMIT_EXCEEDED,
    ENGINES,
    AttrValue,
    CelCompileError,
    CelDevice,
    CelEnvironment,
    CelFeatures,
    CelRuntimeError,
)
from dra_solver.model.quantity import Quantity, parse_quantity
from dra_solver.model.semver import parse_semver

D = "dra.example.com"


def device(
    attributes: Mapping[str, AttrValue] | None = None,
    capacity: Mapping[str, str] | None = None,
    *,
    driver: str = D,
    multi: bool | None = None,
) -> CelDevice:
    caps: dict[str, Quantity] = {k: parse_quantity(v) for k, v in (capacity or {}).items()}
    return CelDevice(driver, dict(attributes or {}), caps, multi)


def v(text: str) -> object:
    return parse_semver(text)


GPU = device(
    {
        "model": "A100-SXM4-40GB",
        "index": 2,
        "rdma": True,
        "family": "Arc",
        "driverVersion": parse_semver("1.2.3-rc.1+build"),
        "ids": (1, 2, 3),
        "names": ("eth0", "ib0"),
        "flags": (True, False),
        "versions": (parse_semver("1.0.0"), parse_semver("2.0.0")),
        "empty": (),
        "other.example.com/zone": "a",
        "resource.kubernetes.io/pciBusID": "0000:00:01.0",
    },
    {"memory": "40Gi", "cores": "1000m", "counters": "4", "other.example.com/slots": "8"},
    multi=True,
)

NO_FEATURES = CelFeatures(consumable_capacity=False, list_type_attributes=False)


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    device: CelDevice = GPU
    expect: bool | None = None
    compile_error: str | None = None
    runtime_error: str | None = None
    features: CelFeatures = field(default_factory=CelFeatures)
    cost_limit: int = 1_000_000
    max_cost: int | None = None


def long_list(n: int) -> tuple[str, ...]:
    return tuple(f"value-{i}" for i in range(n))


EXPENSIVE = (
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z4, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)

UPSTREAM: list[Case] = [
    Case("upstream/true", "true", device(), True, max_cost=0),
    Case("upstream/false", "false", device(), False, max_cost=0),
    Case("upstream/syntax-error", "?!", compile_error="Syntax error"),
    Case("upstream/type-error", "1", compile_error="must evaluate to bool or the unknown type, not int"),
    Case("upstream/runtime-error-lookup-identifier",
         'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', device(),
         runtime_error="no such key: noSuchAttr", max_cost=6),
    Case("upstream/runtime-error-lookup-map",
         'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', device(),
         runtime_error="no such key: noSuchAttr", max_cost=6),
    Case("upstream/domain-check-negative", '"no-such-domain" in device.attributes', device(), False, max_cost=3),
    Case("upstream/domain-check-positive", '"dra.example.com" in device.attributes',
         device({"services": "some_example_value"}), True, max_cost=3),
    Case("upstream/empty-driver-name", 'device.driver == ""', device(driver=""), True, max_cost=2),
    Case("upstream/real-driver-name", 'device.driver == "dra.example.com"', device(), True, max_cost=4),
    Case("upstream/driver-name-qualifier", 'device.attributes["dra.example.com"].name',
         device({"name": True}), True, max_cost=4),
    Case("upstream/driver-name-qualifier-map-lookup", 'device.attributes["dra.example.com"]["name"]',
         device({"name": True}), True, max_cost=4),
    Case("upstream/bind", 'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
         device({"name": True}), True, max_cost=15),
    Case("upstream/qualified-attribute-name", 'device.attributes["other.example.com"].name',
         device({"other.example.com/name": True}), True, max_cost=4),
    Case("upstream/int", 'device.attributes["dra.example.com"].name > 0', device({"name": 1}), True, max_cost=5),
    Case("upstream/string", 'device.attributes["dra.example.com"].name == "fish"', device({"name": "fish"}),
         True, max_cost=5),
    Case("upstream/macro-exists-on-int", 'device.attributes["dra.example.com"].name.exists(x, x > 0)',
         device({"name": 1}), runtime_error="expected iterable type", max_cost=389),
    Case("upstream/macro-exists-on-bool", 'device.attributes["dra.example.com"].name.exists(x, x == true)',
         device({"name": True}), runtime_error="expected iterable type", max_cost=389),
    Case("upstream/macro-exists-on-string", 'device.attributes["dra.example.com"].name.exists(x, x == "fish")',
         device({"name": "fish"}), runtime_error="expected iterable type", max_cost=389),
    Case("upstream/list-result-type-causes-match-error", 'device.attributes["dra.example.com"].names',
         device({"names": ("fish", "bird")}), runtime_error="CEL result of type list could not be converted to bool",
         max_cost=4),
    Case("upstream/includes-function-can-evaluate", 'device.attributes["dra.example.com"].name.includes("fish")',
         device({"name": ("fish", "bird")}), True, max_cost=52),
    *[
        Case(f"upstream/list-of-{kind}", 'device.attributes["dra.example.com"].names.size() == 2',
             device({"names": values}), True, max_cost=6)
        for kind, values in (("bool", (True, False)), ("int", (1, 2)), ("string", ("fish", "bird")),
                             ("semver", (parse_semver("1.0.0"), parse_semver("2.0.0"))))
    ],
    Case("upstream/macro-on-list-of-int", 'device.attributes["dra.example.com"].names.exists(x, x > 0)',
         device({"names": (1, 2)}), True, max_cost=389),
    Case("upstream/macro-on-list-of-string", 'device.attributes["dra.example.com"].names.all(x, x != "")',
         device({"names": ("fish", "bird")}), True, max_cost=261),
    Case("upstream/macro-on-list-of-semver",
         'device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))',
         device({"names": (parse_semver("1.0.0"), parse_semver("2.0.0"))}), True, max_cost=389),
    Case("upstream/includes-function-compilation-error",
         'device.attributes["dra.example.com"].attr.includes("fish")',
         features=CelFeatures(list_type_attributes=False), compile_error="undeclared reference to 'includes'"),
    Case("upstream/includes-function-compilation-and-eval-success",
         'device.attributes["dra.example.com"].attr.includes("fish")', device({"attr": "fish"}), True),
    *[
        Case(f"upstream/includes-{name}", f'device.attributes["dra.example.com"].name.includes({arg})',
             device({"name": value}), expect)
        for name, value, arg, expect in (
            ("bool-scalar-positive", True, "true", True), ("bool-scalar-negative", False, "true", False),
            ("bool-list-positive", (True, False), "true", True), ("bool-list-negative", (True, True), "false", False),
            ("int-scalar-positive", 1, "1", True), ("int-scalar-negative", 2, "1", False),
            ("int-list-positive", (1, 2), "1", True), ("int-list-negative", (1, 2), "3", False),
            ("string-scalar-positive", "fish", '"fish"', True), ("string-scalar-negative", "fish", '"bird"', False),
            ("string-list-positive", ("fish", "bird"), '"fish"', True),
            ("string-list-negative", ("fish", "bird"), '"cat"', False),
            ("semver-scalar-positive", parse_semver("1.0.0"), 'semver("1.0.0")', True),
            ("semver-scalar-negative", parse_semver("1.0.0"), 'semver("2.0.0")', False),
            ("semver-list-positive", (parse_semver("1.0.0"), parse_semver("2.0.0")), 'semver("1.0.0")', True),
            ("semver-list-negative", (parse_semver("1.0.0"), parse_semver("2.0.0")), 'semver("3.0.0")', False),
        )
    ],
    Case("upstream/includes-very-long-list-positive", 'device.attributes["dra.example.com"].name.includes("value-48")',
         device({"name": long_list(48)}), False),
    Case("upstream/includes-very-long-list-runtime-error",
         'device.attributes["dra.example.com"].name.includes("value-49")', device({"name": long_list(49)}),
         runtime_error="'includes' function cannot be applied to lists longer than 48 values"),
    Case("upstream/in-operator-on-list", '1 in device.attributes["dra.example.com"].names',
         device({"names": (1, 2, 3)}), True, max_cost=68),
    Case("upstream/version", 'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
         device({"name": parse_semver("1.0.0")}), True, max_cost=6),
    Case("upstream/version_v",
         'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
         device({"name": parse_semver("1.0.0")}), True, max_cost=7),
    Case("upstream/macro-exists-on-version",
         'device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
         device({"name": parse_semver("1.0.0")}), runtime_error="expected iterable type", max_cost=453),
    Case("upstream/quantity", 'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
         device(capacity={"name": "1Mi"}), True, max_cost=6),
    Case("upstream/check-positive",
         '"name" in device.capacity["dra.example.com"] && device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
         device(capacity={"name": "1Mi"}), True, max_cost=10),
    Case("upstream/check-negative",
         '!("name" in device.capacity["dra.example.com"]) || device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
         device(), True, max_cost=11),
    Case("upstream/all", """
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
""", device({"bool": True, "int": 1, "string": "fish", "version": parse_semver("1.0.0")}, {"quantity": "1Mi"}),
         True, max_cost=52),
    Case("upstream/many",
         'device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && device.attributes["dra.example.com"].c',
         device({"a": True, "b": True, "c": True}), True, max_cost=12),
    Case("upstream/check_attribute_domains", 'device.attributes.exists_one(x, x == "dra.example.com")',
         device({"services": "some_example_value"}), True, max_cost=164),
    Case("upstream/check_attribute_ids", 'device.attributes["dra.example.com"].exists_one(x, x == "services")',
         device({"services": "some_example_value"}), True, max_cost=133),
    Case("upstream/split_attribute", 'device.attributes["dra.example.com"].services.split("example").size() >= 2',
         device({"services": "some_example_value"}), True, max_cost=19),
    Case("upstream/regexp_attribute", 'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
         device({"services": "asymetric"}), True, max_cost=18),
    Case("upstream/check_capacity_domains", 'device.capacity.exists_one(x, x == "dra.example.com")',
         device(capacity={"memory": "1Mi"}), True, max_cost=164),
    Case("upstream/check_capacity_ids", 'device.capacity["dra.example.com"].exists_one(x, x == "memory")',
         device(capacity={"memory": "1Mi"}), True, max_cost=133),
    Case("upstream/expensive", EXPENSIVE, device({"x": "abc"}), runtime_error="actual cost limit exceeded",
         max_cost=85555551),
    Case("upstream/allow_multiple_allocations", "device.allowMultipleAllocations == true", device(multi=True),
         True, max_cost=3),
    Case("upstream/allow_multiple_allocations_default", "device.allowMultipleAllocations == false",
         device(multi=None), True, max_cost=3),
    Case("upstream/allow_multiple_allocations_false", "device.allowMultipleAllocations == false",
         device(multi=False), True, max_cost=3),
    Case("upstream/allow_multiple_allocations_disabled", "device.allowMultipleAllocations == false",
         features=CelFeatures(consumable_capacity=False), compile_error="undefined field 'allowMultipleAllocations'"),
    # TestCELFeatureCombinations (NewExpressions with every gate off)
    Case("upstream/features-off/scalar-attribute", 'device.attributes["dra.example.com"].ready',
         device({"ready": True}), True, features=NO_FEATURES),
    Case("upstream/features-off/list-attribute", 'device.attributes["dra.example.com"].ids.exists(id, id == 1)',
         features=NO_FEATURES, compile_error="cannot be range of a comprehension"),
    Case("upstream/features-off/includes", 'device.attributes["dra.example.com"].name.includes("fish")',
         features=NO_FEATURES, compile_error="undeclared reference to 'includes'"),
    Case("upstream/features-off/multiple-allocations", "device.allowMultipleAllocations",
         features=NO_FEATURES, compile_error="undefined field 'allowMultipleAllocations'"),
    Case("upstream/features-on/list-attribute-with-multiple-allocations",
         'device.allowMultipleAllocations && device.attributes["dra.example.com"].ids.exists(id, id == 1)',
         device({"ids": (1, 2)}, multi=True), True),
]

G = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'

FUNCTIONS: list[Case] = [
    # the device variable
    Case("device/driver", 'device.driver == "dra.example.com"', expect=True),
    Case("device/bare-name-is-driver-domain", f'{G}.model == "A100-SXM4-40GB"', expect=True),
    Case("device/field-select-on-domain", 'device.attributes["other.example.com"].zone == "a"', expect=True),
    Case("device/resource-kubernetes-io", 'device.attributes["resource.kubernetes.io"].pciBusID == "0000:00:01.0"',
         expect=True),
    Case("device/dynamic-domain", "device.attributes[device.driver].index == 2", expect=True),
    Case("device/capacity-other-domain", 'device.capacity["other.example.com"].slots.compareTo(quantity("8")) == 0',
         expect=True),
    Case("device/allowMultipleAllocations", "device.allowMultipleAllocations", expect=True),
    Case("device/unknown-field", "device.foo", compile_error="undefined field 'foo'"),
    Case("device/int-attribute-compare-double", f"{G}.index < 2.5", expect=True),
    Case("device/int-attribute-compare-uint", f"{G}.index > 1u", expect=True),
    # missing keys and unknown domains
    Case("keys/missing-attribute", f"{G}.missing == 1", runtime_error="no such key: missing"),
    Case("keys/missing-attribute-index", f'{G}["missing"] == 1', runtime_error="no such key: missing"),
    Case("keys/missing-capacity", f'{C}.missing.isZero()', compile_error="undeclared reference to 'isZero'"),
    Case("keys/missing-capacity-runtime", f'{C}.missing.compareTo(quantity("1")) > 0',
         runtime_error="no such key: missing"),
    Case("keys/unknown-domain-is-empty-map", 'device.attributes["nope.example.com"].size() == 0', expect=True),
    Case("keys/unknown-domain-lookup-errors", 'device.attributes["nope.example.com"].x', runtime_error="no such key: x"),
    Case("keys/unknown-domain-has", 'has(device.attributes["nope.example.com"].x)', expect=False),
    Case("keys/unknown-domain-has-domain", "has(device.attributes.nope)", expect=True),
    Case("keys/unknown-domain-not-in", '"nope.example.com" in device.attributes', expect=False),
    Case("keys/known-domain-in", '"other.example.com" in device.attributes', expect=True),
    Case("keys/in-guard", '"nope.example.com" in device.attributes && device.attributes["nope.example.com"].x',
         expect=False),
    Case("keys/domains-are-real", "device.attributes.size() == 3 && device.capacity.size() == 2", expect=True),
    Case("keys/has-attribute", f"has({G}.rdma) && !has({G}.nope)", expect=True),
    Case("keys/in-attribute", f'"rdma" in {G} && !("nope" in {G})', expect=True),
    Case("keys/optional-chaining", f"{G}.?nope.orValue(7) == 7 && {G}.?index.orValue(7) == 2", expect=True),
    Case("keys/optional-index", f'{G}[?"nope"].hasValue()', expect=False),
    Case("keys/optional-unknown-domain", 'device.attributes[?"nope.example.com"].hasValue()', expect=True),
    Case("keys/optional-unknown-domain-select", 'device.attributes.?nope.orValue({"x": 1}).size() == 0', expect=True),
    # quantity
    Case("quantity/compareTo", f'{C}.memory.compareTo(quantity("4Gi")) >= 0', expect=True),
    Case("quantity/isGreaterThan", f'{C}.memory.isGreaterThan(quantity("40G"))', expect=True),
    Case("quantity/isLessThan", f'{C}.memory.isLessThan(quantity("41Gi"))', expect=True),
    Case("quantity/equality-by-value", f'{C}.memory == quantity("40960Mi")', expect=True),
    Case("quantity/inequality", f'{C}.memory != quantity("40G")', expect=True),
    Case("quantity/equality-across-forms", 'quantity("200M") == quantity("0.2G") && quantity("1000m") == quantity("1")',
         expect=True),
    Case("quantity/in-list", 'quantity("1Gi") in [quantity("1024Mi"), quantity("1")]', expect=True),
    Case("quantity/isQuantity", 'isQuantity("1.5G") && !isQuantity("200K") && !isQuantity("10Mo")', expect=True),
    Case("quantity/parse-error", 'quantity("10Mo").sign() == 0', compile_error="undeclared reference to 'sign'"),
    Case("quantity/parse-error-runtime", 'sign(quantity("10Mo")) == 0',
         runtime_error="quantities must match the regular expression"),
    Case("quantity/suffix-error-runtime", 'sign(quantity("10Mm")) == 0', runtime_error="unable to parse quantity's suffix"),
    Case("quantity/sign", 'sign(quantity("-1")) == -1 && sign(quantity("0")) == 0', expect=True),
    Case("quantity/add-sub", 'quantity("50k").add(quantity("20")) == quantity("50.02k") && '
         'quantity("50k").sub(20) == quantity("49980") && quantity("50k").add(20).sub(quantity("100k")).sub(-50000)'
         '.asInteger() == 20', expect=True),
    Case("quantity/asInteger", f'{C}.counters.asInteger() == 4', expect=True),
    Case("quantity/asInteger-error", 'quantity("9999999999999999999999999999999999999G").asInteger() == 1',
         runtime_error="cannot convert value to integer"),
    Case("quantity/isInteger-follows-form", f'!{C}.cores.isInteger() && quantity("50").isInteger()', expect=True),
    Case("quantity/asApproximateFloat", 'quantity("50.703k").asApproximateFloat() == 50703.0', expect=True),
    Case("quantity/no-field-access", f"{C}.memory.encoded == ''", compile_error="undefined field 'encoded'"),
    Case("quantity/no-construction", "kubernetes.Quantity{} == quantity('1')", compile_error="compilation failed"),
    Case("quantity/result-type", f"{C}.memory", compile_error="not kubernetes.Quantity"),
    # semver
    Case("semver/attribute", f'{G}.driverVersion.isLessThan(semver("1.2.3"))', expect=True),
    Case("semver/parts", f"{G}.driverVersion.major() == 1 && {G}.driverVersion.minor() == 2 && "
         f"{G}.driverVersion.patch() == 3", expect=True),
    Case("semver/compareTo", 'semver("1.0.0").compareTo(semver("2.0.0")) == -1', expect=True),
    Case("semver/equality-ignores-build", f'{G}.driverVersion == semver("1.2.3-rc.1+other")', expect=True),
    Case("semver/isSemver", 'isSemver("1.0.0") && !isSemver("1.0") && isSemver("v1.0", true)', expect=True),
    Case("semver/normalize", 'semver("v1.2", true) == semver("1.2.0")', expect=True),
    Case("semver/parse-error", 'semver("1.0").major() == 1', runtime_error="No Major.Minor.Patch elements found"),
    # strings extension
    Case("strings/lowerAscii", f'{G}.model.lowerAscii().matches("^.*a100.*$")', expect=True),
    Case("strings/upperAscii", f'{G}.family.upperAscii() == "ARC"', expect=True),
    Case("strings/split-join", '"a,b,c".split(",").join("-") == "a-b-c" && "a,b,c".split(",", 2).size() == 2',
         expect=True),
    Case("strings/replace", '"aaa".replace("a", "b") == "bbb" && "aaa".replace("a", "b", 1) == "baa"', expect=True),
    Case("strings/trim", '"  x ".trim() == "x"', expect=True),
    Case("strings/indexOf", '"abcab".indexOf("b") == 1 && "abcab".lastIndexOf("b") == 4 && "abcab".indexOf("b", 2) == 4',
         expect=True),
    Case("strings/substring-charAt", '"gpu3rdma0".substring(3, 4) == "3" && "abc".charAt(1) == "b" && '
         '"abc".substring(1) == "bc"', expect=True),
    Case("strings/startsWith-endsWith-contains",
         f'{G}.family.startsWith("Ar") && {G}.family.endsWith("rc") && {G}.model.contains("SXM4")', expect=True),
    Case("strings/matches", f'{G}.model.matches("^A[0-9]+")', expect=True),
    Case("strings/format-quote", '"%s-%d".format(["a", dyn(1)]) == "a-1" && strings.quote("a") == "\\"a\\""',
         expect=True),
    Case("strings/int-conversion", 'int("gpu3rdma0".substring(3, 4)) < 4', expect=True),
    Case("strings/int-conversion-error", 'int("x") == 1', runtime_error="cannot convert string to int"),
    Case("strings/no-reverse", '"abc".reverse() == "cba"', compile_error="undeclared reference to 'reverse'"),
    # lists library
    Case("lists/isSorted", "[1, 2, 3].isSorted() && !['b', 'a'].isSorted()", expect=True),
    Case("lists/sum", f"{G}.ids.sum() == 6 && [1.5, 2.5].sum() == 4.0", expect=True),
    Case("lists/min-max", f'{G}.ids.min() == 1 && {G}.ids.max() == 3 && ["b", "a"].min() == "a"', expect=True),
    Case("lists/min-empty", f"{G}.empty.min() == 1", runtime_error="min called on empty list"),
    Case("lists/indexOf", f"{G}.ids.indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2 && [1].indexOf(5) == -1",
         expect=True),
    Case("lists/indexOf-type-check", '[1, 2].indexOf("a") == -1', compile_error="found no matching overload for 'indexOf'"),
    Case("lists/sum-overflow", "[9223372036854775807, 1].sum() > 0", runtime_error="integer overflow"),
    # sets
    Case("sets/contains", f"sets.contains({G}.ids, [1, 3]) && !sets.contains([1], [2])", expect=True),
    Case("sets/equivalent", "sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 2])", expect=True),
    Case("sets/intersects", f'sets.intersects({G}.names, ["ib0", "x"]) && !sets.intersects([1], [2])', expect=True),
    Case("sets/type-check", 'sets.contains([1], ["a"])', compile_error="found no matching overload for 'sets.contains'"),
    # regex
    Case("regex/find", '"abc123def456".find("[0-9]+") == "123" && "abc".find("[0-9]") == ""', expect=True),
    Case("regex/findAll", '"a1b2c3".findAll("[0-9]") == ["1", "2", "3"] && "a1b2c3".findAll("[0-9]", 2).size() == 2',
         expect=True),
    Case("regex/illegal", '"a".find("[") == ""', runtime_error="Illegal regex"),
    # list attributes and includes
    Case("lists/attribute-in", f'"ib0" in {G}.names && !(5 in {G}.ids)', expect=True),
    Case("lists/attribute-macros", f"{G}.ids.all(i, i > 0) && {G}.ids.exists_one(i, i == 2) && "
         f"{G}.ids.map(i, i * 2) == [2, 4, 6] && {G}.ids.filter(i, i > 1).size() == 2", expect=True),
    Case("lists/includes-bool", f"{G}.flags.includes(false)", expect=True),
    Case("lists/includes-semver", f'{G}.versions.includes(semver("2.0.0"))', expect=True),
    Case("lists/includes-scalar", f'{G}.family.includes("Arc")', expect=True),
    Case("lists/includes-bool-is-not-int", f"{G}.flags.includes(1)", expect=False),
    # bind, optionals, macros, operators
    Case("bind/nested", f'cel.bind(g, {G}, cel.bind(n, g.names, n.size() == 2 && g.index == 2))', expect=True),
    Case("optional/of-or", "optional.none().or(optional.of(1)).value() == 1", expect=True),
    Case("optional/list-entry", "[?optional.none(), ?optional.of(2)] == [2]", expect=True),
    Case("macros/has-map-literal", "has({'a': 1}.a) && !has({'a': 1}.b)", expect=True),
    Case("operators/in-map", "'a' in {'a': 1}", expect=True),
    Case("operators/ternary", f"{G}.index == 2 ? true : false", expect=True),
    Case("operators/division-by-zero", f"{G}.index / 0 == 1", runtime_error="division by zero"),
    Case("operators/modulus-by-zero", f"{G}.index % 0 == 1", runtime_error="modulus by zero"),
    Case("operators/overflow", "9223372036854775807 + 1 > 0", runtime_error="integer overflow"),
    Case("operators/index-out-of-range", f"{G}.ids[5] == 1", runtime_error="index '5' out of range in list size '3'"),
    Case("operators/error-absorbed-by-or", f"true || {G}.missing", expect=True),
    Case("operators/error-absorbed-by-and", f"{G}.missing && false", expect=False),
    Case("operators/no-such-overload", 'dyn(1) + "a" == "1a"', runtime_error="no such overload"),
    Case("types/type-function", f"type({G}.index) == int && type({G}.names) == list", expect=True),
    # compile-time checks
    Case("compile/undeclared", "noSuchVar", compile_error="undeclared reference to 'noSuchVar' (in container '')"),
    Case("compile/empty", "", compile_error="Syntax error"),
    Case("compile/heterogeneous-list", '[1, "a"].size() == 2', compile_error="expected type 'int' but found 'string'"),
    Case("compile/heterogeneous-map", '{"a": 1, "b": "c"}.size() == 2',
         compile_error="expected type 'int' but found 'string'"),
    Case("compile/dyn-list-is-fine", '[1, dyn("a")].size() == 2 && [dyn(1), "a", 2].size() == 3', expect=True),
    Case("compile/heterogeneous-after-dyn", '[dyn(1), "a"].size() == 2 && ["a", 1.0].size() == 2',
         compile_error="expected type 'string' but found 'double'"),
    Case("compile/no-matching-overload", '1 + "a" == 2', compile_error="found no matching overload for '_+_'"),
    Case("compile/string-result", f"{G}.model", runtime_error="CEL result of type string could not be converted to bool"),
    Case("compile/int-result-off-gate", f"{G}.index", features=NO_FEATURES, device=device({"index": 1}),
         runtime_error="CEL result of type int could not be converted to bool"),
    Case("compile/dyn-result-off-gate", "dyn(true)", features=NO_FEATURES,
         compile_error="must evaluate to bool or the unknown type, not dyn"),
    # cost limit
    Case("cost/limit-applies-per-device", 'device.driver == "dra.example.com"', cost_limit=3,
         runtime_error=CEL_COST_LIMIT_EXCEEDED, max_cost=4),
    Case("cost/quantity-equality-is-cheap-at-runtime", f'{C}.memory == quantity("40Gi")', expect=True),
    Case("cost/quantity-equality-estimate-is-unbounded", f'{C}.memory == quantity("40Gi")', expect=True,
         max_cost=1844674407370955269),
]

TABLE = UPSTREAM + FUNCTIONS

_ENVIRONMENTS: dict[tuple[str, CelFeatures, int], CelEnvironment] = {}


def environment(engine: str, features: CelFeatures, cost_limit: int) -> CelEnvironment:
    key = (engine, features, cost_limit)
    if key not in _ENVIRONMENTS:
        _ENVIRONMENTS[key] = CelEnvironment(engine=engine, features=features, cost_limit=cost_limit)
    return _ENVIRONMENTS[key]


def test_table_names_are_unique() -> None:
    names = [case.name for case in TABLE]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", TABLE, ids=[case.name for case in TABLE])
def test_conformance(engine: str, case: Case) -> None:
    env = environment(engine, case.features, case.cost_limit)
    if case.compile_error is not None:
        with pytest.raises(CelCompileError) as err:
            env.compile(case.expression)
        assert case.compile_error in str(err.value)
        return
    selector = env.compile(case.expression)
    if case.max_cost is not None:
        assert selector.max_cost == case.max_cost
    if case.runtime_error is not None:
        with pytest.raises(CelRuntimeError) as runtime:
            env.matches(selector, case.device)
        assert case.runtime_error in str(runtime.value)
        return
    assert env.matches(selector, case.device) is case.expect
    assert selector.matches(case.device) is case.expect  # the same answer through the selector
