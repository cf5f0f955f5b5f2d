"""``model.quantity`` against apimachinery's own tables (quantity_test.go) and the
quantity strings the upstream allocator printed in the conformance cases."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from dra_solver.model.quantity import (
    ERR_FORMAT_WRONG,
    ERR_SUFFIX,
    Format,
    Quantity,
    QuantityError,
    parse_quantity,
)
from tests.conftest import DATA_DIR

DEC = Format.DECIMAL_SI
BIN = Format.BINARY_SI
EXP = Format.DECIMAL_EXPONENT


def dec(mantissa: int, exponent: int, fmt: Format) -> Quantity:
    """Upstream's ``decQuantity``: the decimal (inf.Dec) form."""
    return Quantity(mantissa, exponent, fmt=fmt, fixed=False)


# --- parsing (TestQuantityParse) -----------------------------------------------------------

PARSE_TABLE = [
    ("0", 0, 0, DEC), ("0n", 0, 0, DEC), ("0u", 0, 0, DEC), ("0m", 0, 0, DEC), ("0Ki", 0, 0, BIN),
    ("0k", 0, 0, DEC), ("0Mi", 0, 0, BIN), ("0M", 0, 0, DEC), ("0Gi", 0, 0, BIN), ("0G", 0, 0, DEC),
    ("0Ti", 0, 0, BIN), ("0T", 0, 0, DEC),
    ("1", 1, 0, DEC),
    ("1Ki", 1024, 0, BIN), ("8Ki", 8 * 1024, 0, BIN), ("7Mi", 7 * 1024**2, 0, BIN),
    ("6Gi", 6 * 1024**3, 0, BIN), ("5Ti", 5 * 1024**4, 0, BIN), ("4Pi", 4 * 1024**5, 0, BIN),
    ("3Ei", 3 * 1024**6, 0, BIN), ("10Ti", 10 * 1024**4, 0, BIN), ("100Ti", 100 * 1024**4, 0, BIN),
    ("5n", 5, -9, DEC), ("4u", 4, -6, DEC), ("3m", 3, -3, DEC), ("9", 9, 0, DEC), ("8k", 8, 3, DEC),
    ("50k", 5, 4, DEC), ("7M", 7, 6, DEC), ("6G", 6, 9, DEC), ("5T", 5, 12, DEC), ("40T", 4, 13, DEC),
    ("300T", 3, 14, DEC), ("2P", 2, 15, DEC), ("1E", 1, 18, DEC),
    ("1E-3", 1, -3, EXP), ("1e3", 1, 3, EXP), ("1E6", 1, 6, EXP), ("1e9", 1, 9, EXP),
    ("1E12", 1, 12, EXP), ("1e15", 1, 15, EXP), ("1E18", 1, 18, EXP),
    ("1e14", 1, 14, EXP), ("1e13", 1, 13, EXP), ("100.035k", 100035, 0, DEC),
    ("0.001", 1, -3, DEC), ("0.0005k", 5, -1, DEC), ("0.005", 5, -3, DEC), ("0.05", 5, -2, DEC),
    ("0.5", 5, -1, DEC), ("0.00050k", 5, -1, DEC), ("0.00500", 5, -3, DEC), ("0.05000", 5, -2, DEC),
    ("0.50000", 5, -1, DEC), ("0.5e0", 5, -1, EXP), ("0.5e-1", 5, -2, EXP), ("0.5e-2", 5, -3, EXP),
    ("10.035M", 10035, 3, DEC), ("1.2e3", 12, 2, EXP), ("1.3E+6", 13, 5, EXP), ("1.40e9", 14, 8, EXP),
    ("1.53E12", 153, 10, EXP), ("1.6e15", 16, 14, EXP), ("1.7E18", 17, 17, EXP),
    ("9.01", 901, -2, DEC), ("8.1k", 81, 2, DEC), ("7.123456M", 7123456, 0, DEC),
    ("6.987654321G", 6987654321, 0, DEC), ("5.444T", 5444, 9, DEC), ("40.1T", 401, 11, DEC),
    ("300.2T", 3002, 11, DEC), ("2.5P", 25, 14, DEC), ("1.01E", 101, 16, DEC),
    ("3.001n", 4, -9, DEC), ("1.1E-9", 2, -9, EXP), ("0.0000000001", 1, -9, DEC),
    ("0.0000000005", 1, -9, DEC), ("0.00000000050", 1, -9, DEC), ("0.5e-9", 1, -9, EXP),
    ("0.9n", 1, -9, DEC), ("0.00000012345", 124, -9, DEC), ("0.00000012354", 124, -9, DEC),
    ("9Ei", (1 << 63) - 1, 0, BIN), ("9223372036854775807Ki", (1 << 63) - 1, 0, BIN),
    ("12E", 12, 18, DEC),
    ("100.035Ki", 10243584, -2, BIN), ("0.5Mi", 512 * 1024, 0, BIN), ("0.05Gi", 536870912, -1, BIN),
    ("0.025Ti", 274877906944, -1, BIN),
    ("0.000000000001Ki", 2, -9, DEC), (".001", 1, -3, DEC), (".0001k", 100, -3, DEC),
    ("1.", 1, 0, DEC), ("1.G", 1, 9, DEC),
]


@pytest.mark.parametrize(("text", "mantissa", "exponent", "fmt"), PARSE_TABLE, ids=[r[0] for r in PARSE_TABLE])
def test_parse(text: str, mantissa: int, exponent: int, fmt: Format) -> None:
    want = dec(mantissa, exponent, fmt)
    for sign, factor in (("", 1), ("+", 1), ("-", -1)):
        got = parse_quantity(sign + text)
        assert got.cmp(dec(factor * mantissa, exponent, fmt)) == 0, sign + text
        assert got.format == fmt
    assert parse_quantity(text) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", ERR_FORMAT_WRONG), ("1.1.M", ERR_FORMAT_WRONG), ("1+1.0M", ERR_FORMAT_WRONG),
        ("0.1mi", ERR_SUFFIX), ("0.1am", ERR_FORMAT_WRONG), ("aoeu", ERR_FORMAT_WRONG),
        (".5i", ERR_SUFFIX), ("1i", ERR_SUFFIX), ("-3.01i", ERR_SUFFIX), ("-3.01e-", ERR_SUFFIX),
        ("1e4294967297", ERR_SUFFIX), (" 1", ERR_FORMAT_WRONG), ("1 ", ERR_FORMAT_WRONG),
        ("10Mo", ERR_FORMAT_WRONG), ("10Mm", ERR_SUFFIX), ("200K", ERR_SUFFIX),
    ],
)
def test_parse_rejects_with_upstream_message(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert str(err.value) == message


def test_a_bare_suffix_is_zero_as_upstream_parses_it() -> None:
    # The scanner accepts an empty number, so upstream's ParseQuantity("Mi") is 0 (the CEL
    # library's doc comment claims an error; the code does not raise one).
    assert parse_quantity("Mi") == 0 and parse_quantity("Mi").format == BIN


def test_format_wrong_message_names_the_regular_expression() -> None:
    assert ERR_FORMAT_WRONG == (
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


# --- printing (TestQuantityString, TestQuantityParseEmit, TestParseQuantity) -------------------

STRING_TABLE = [
    (dec(1024**3, 0, BIN), "1Gi", "1024Mi"),
    (dec(300 * 1024**2, 0, BIN), "300Mi", "307200Ki"),
    (dec(6 * 1024, 0, BIN), "6Ki", ""),
    (dec(1001 * 1024**3, 0, BIN), "1001Gi", "1025024Mi"),
    (dec(1024**4, 0, BIN), "1Ti", "1024Gi"),
    (dec(5, 0, BIN), "5", "5000m"),
    (dec(500, -3, BIN), "500m", "0.5"),
    (dec(1, 9, DEC), "1G", "1000M"),
    (dec(1000, 6, DEC), "1G", "0.001T"),
    (dec(1000000, 3, DEC), "1G", ""),
    (dec(1000000000, 0, DEC), "1G", ""),
    (dec(1, -3, DEC), "1m", "1000u"),
    (dec(80, -3, DEC), "80m", ""),
    (dec(1080, -3, DEC), "1080m", "1.08"),
    (dec(108, -2, DEC), "1080m", "1080000000n"),
    (dec(10800, -4, DEC), "1080m", ""),
    (dec(300, 6, DEC), "300M", ""),
    (dec(1, 12, DEC), "1T", ""),
    (dec(1, 18, DEC), "1E", ""),
    (dec(1, 21, DEC), "1e21", "1000E"),
    (dec(5, 21, DEC), "5e21", "5000E"),
    (dec(1, 24, DEC), "1e24", "1000000E"),
    (dec(1, 70, BIN), "10e69", ""),
    (dec(2, 70, BIN), "20e69", ""),
    (dec(1, 72, BIN), "1e72", ""),
    (dec(1234567, 6, DEC), "1234567M", ""),
    (dec(1234567, -3, BIN), "1234567m", ""),
    (dec(3, 3, DEC), "3k", ""),
    (dec(1025, 0, BIN), "1025", ""),
    (dec(0, 0, DEC), "0", ""),
    (dec(0, 0, BIN), "0", ""),
    (dec(1, 9, EXP), "1e9", ".001e12"),
    (dec(1, -3, EXP), "1e-3", "0.001e0"),
    (dec(1, -9, EXP), "1e-9", "1000e-12"),
    (dec(80, -3, EXP), "80e-3", ""),
    (dec(300, 6, EXP), "300e6", ""),
    (dec(1, 12, EXP), "1e12", ""),
    (dec(1, 3, EXP), "1e3", ""),
    (dec(3, 3, EXP), "3e3", ""),
    (dec(0, 0, EXP), "0", "00"),
    (dec(1, -9, DEC), "1n", ""),
    (dec(80, -9, DEC), "80n", ""),
    (dec(1080, -9, DEC), "1080n", ""),
    (dec(108, -8, DEC), "1080n", ""),
    (dec(10800, -10, DEC), "1080n", ""),
    (dec(1, -6, DEC), "1u", ""),
    (dec(80, -6, DEC), "80u", ""),
    (dec(1080, -6, DEC), "1080u", ""),
]


@pytest.mark.parametrize(("quantity", "canonical", "alternate"), STRING_TABLE, ids=[r[1] for r in STRING_TABLE])
def test_canonical_string(quantity: Quantity, canonical: str, alternate: str) -> None:
    assert str(quantity) == canonical
    assert str(parse_quantity(canonical)) == canonical
    if alternate:
        assert str(parse_quantity(alternate)) == canonical
    if not quantity.is_zero():
        assert str(quantity.neg()) == "-" + canonical


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("1Ki", "1Ki"), ("1Mi", "1Mi"), ("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1000M", "1G"),
        (".001Ki", "1024m"), (".000001Ki", "1024u"), (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        # TestParseQuantity: the fast path keeps canonical input, the decimal path canonicalises
        ("999999999999999999.1", "999999999999999999100m"),
        ("-9999999999999999999.1", "-9999999999999999999100m"),
        ("1000000000000000000", "1E"), ("1.0E", "1E"), ("10000000000000000000.0", "10E"),
        ("1.0000000000000000001E", "1000000000000000000100m"),
        ("9223372036854775807", "9223372036854775807"), ("9223372036854775808.1", "9223372036854775808100m"),
        # quirks of upstream's "keep the canonical input" rule
        ("+1", "+1"), ("05", "05"), ("1.5", "1500m"), ("1.5Gi", "1536Mi"), ("0.5", "500m"),
        ("1000m", "1"), ("3.001n", "4n"), ("0.5e-9", "1e-9"), ("1000E", "1e21"), ("9Ei", "9223372036854775807"),
    ],
)
def test_parse_then_print(text: str, printed: str) -> None:
    assert str(parse_quantity(text)) == printed
    if not text.startswith(("+", "0", ".")) and printed != text and not printed.startswith("-"):
        assert str(parse_quantity("-" + text)) == "-" + printed


@pytest.mark.parametrize(
    ("value", "fmt", "printed"),
    [
        (1, DEC, "1"), (1000, DEC, "1k"), (1234000, DEC, "1234k"), (1024, BIN, "1Ki"),
        (1024 * 1024, BIN, "1Mi"), (4 * 1024**3, BIN, "4Gi"), (3, BIN, "3"), (1000000, EXP, "1e6"),
    ],
)
def test_from_int_prints_like_new_quantity(value: int, fmt: Format, printed: str) -> None:
    assert str(Quantity.from_int(value, fmt)) == printed


@pytest.mark.parametrize(
    ("value", "fmt", "printed"),
    [(1, DEC, "1m"), (1000, DEC, "1"), (1234000, DEC, "1234"), (1024, BIN, "1024m"), (1024 * 1024, BIN, "1048576m")],
)
def test_from_milli(value: int, fmt: Format, printed: str) -> None:
    assert str(Quantity.from_milli(value, fmt)) == printed


def _consumed_capacity_strings() -> list[str]:
    found: set[str] = set()
    for path in sorted((DATA_DIR / "conformance" / "cases").glob("*.json")):
        case = json.loads(path.read_text())
        for result in case["expect"].get("results") or []:
            for device in ((result or {}).get("devices") or {}).get("results") or []:
                found.update((device.get("consumedCapacity") or {}).values())
    return sorted(found)


def test_conformance_consumed_capacity_strings_round_trip() -> None:
    strings = _consumed_capacity_strings()
    assert strings, "no consumedCapacity in the conformance cases"
    for text in strings:
        assert str(parse_quantity(text)) == text
    # upstream builds rounded-up amounts with NewQuantity(value, BinarySI)
    for text in strings:
        assert str(Quantity.from_int(parse_quantity(text).value(), BIN)) == text


# --- values and arithmetic -------------------------------------------------------------------


def test_equality_and_hash_by_value() -> None:
    assert parse_quantity("1Gi") == 1073741824
    assert parse_quantity("1Gi") == parse_quantity("1024Mi") == parse_quantity("1073741824")
    assert hash(parse_quantity("1Gi")) == hash(1073741824)
    assert hash(parse_quantity("1.5")) == hash(Fraction(3, 2))
    assert hash(parse_quantity("-250m")) == hash(Fraction(-1, 4))
    assert parse_quantity("1000m") == parse_quantity("1")
    assert parse_quantity("1000m").identity() != parse_quantity("1").identity()
    assert len({parse_quantity("1k"), parse_quantity("1000"), parse_quantity("1e3")}) == 1
    assert parse_quantity("1") != True  # noqa: E712 - bool is not a number to CEL
    assert sorted([parse_quantity("1Gi"), parse_quantity("1G"), parse_quantity("1")]) == [
        parse_quantity("1"), parse_quantity("1G"), parse_quantity("1Gi"),
    ]


@pytest.mark.parametrize(
    ("a", "b", "expect"),
    [("0", "0", 0), ("100m", "50m", 1), ("50m", "100m", -1), ("10000T", "100Gi", 1),
     ("200M", "0.2G", 0), ("50M", "50Mi", -1), ("1e-400", "0", 1), ("1e400", "9e399", 1)],
)
def test_cmp(a: str, b: str, expect: int) -> None:
    assert parse_quantity(a).cmp(parse_quantity(b)) == expect
    assert parse_quantity(b).cmp(parse_quantity(a)) == -expect


def test_add_sub() -> None:
    assert parse_quantity("50k").add(parse_quantity("20")) == parse_quantity("50.02k")
    assert parse_quantity("50k").sub(parse_quantity("20")) == parse_quantity("49.98k")
    assert str(parse_quantity("100m").add(parse_quantity("0"))) == "100m"
    assert str(parse_quantity("0").add(parse_quantity("1Gi"))) == "1Gi"  # zero adopts the format
    assert str(parse_quantity("0").sub(parse_quantity("1Gi"))) == "-1Gi"
    assert str(parse_quantity("1Ei").add(parse_quantity("1Ei")).add(parse_quantity("1Ei"))) == "3Ei"
    big = Quantity.from_int((1 << 63) - 1).add(Quantity.from_int(1))
    assert not big.is_fixed_point and str(big) == "9223372036854775808"
    assert str(Quantity.from_int(-(1 << 63)).neg()) == "9223372036854775808"
    assert str(parse_quantity("1Gi") + parse_quantity("1Gi") - parse_quantity("1Mi")) == "2047Mi"


def test_as_int64_follows_the_internal_form() -> None:
    assert parse_quantity("50k").as_int64() == 50000
    assert parse_quantity("1E").as_int64() == 10**18
    assert parse_quantity("999999999999999999").as_int64() == 999999999999999999
    assert parse_quantity("1000m").as_int64() is None  # negative scale
    assert parse_quantity("1.0").as_int64() is None
    assert parse_quantity("9223372036854775807").as_int64() is None  # 19 digits: decimal form
    assert parse_quantity("9999999999999999999999999999999999999G").as_int64() is None
    assert parse_quantity("10E").as_int64() is None
    assert not parse_quantity("1.5").is_integer()
    assert parse_quantity("50").is_integer()


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [("-.484785E-7466", -1, -1), (".484785E-7466", 1, 1), ("-.484785E-1", -1, -49), (".484785E-1", 1, 49),
     ("-0.0005", -1, -1), ("0.0005", 1, 1), ("-1500m", -2, -1500), ("1500m", 2, 1500),
     ("-9.5000000001Gi", -10200547329, -10200547328108), ("9.5000000001Gi", 10200547329, 10200547328108),
     ("-1", -1, -1000), ("1", 1, 1000), ("0", 0, 0)],
)
def test_value_rounds_away_from_zero(text: str, value: int, milli: int) -> None:
    q = parse_quantity(text)
    assert q.value() == value
    assert q.milli_value() == milli


@pytest.mark.parametrize(
    ("quantity", "expect"),
    [
        (dec(0, 500, DEC), 0.0), (dec(1, 0, BIN), 1.0), (dec(7 * 1024 * 1024, 4, DEC), 7 * 1024 * 1024 * 10000.0),
        (dec(7 * 1024 * 1024, -8, DEC), (7 * 1024 * 1024) / 100000000.0),
        (dec((1 << 63) - 1, 0, BIN), float((1 << 63) - 1)), (dec(12, 18, DEC), 1.2e19),
        (dec(12, 500, DEC), float("inf")), (dec(-12, 500, DEC), float("-inf")),
        (parse_quantity("2Ki"), 2048.0), (parse_quantity("1.1Ki"), 1126.4),
        (parse_quantity("1Mi"), 1.048576e06), (parse_quantity("2Gi"), 2.147483648e09),
        (parse_quantity("50.703k"), 50703.0),
    ],
)
def test_as_approximate_float(quantity: Quantity, expect: float) -> None:
    assert quantity.as_approximate_float() == expect


def test_huge_exponents_stay_cheap() -> None:
    q = parse_quantity("1e2147483647")
    assert q > parse_quantity("1E") and q.sign() == 1
    assert hash(q) == hash(parse_quantity("10e2147483646"))
    with pytest.raises(QuantityError):
        q.add(parse_quantity("1"))
    assert parse_quantity("1e-2147483647") == parse_quantity("1n")


def test_immutable_and_picklable() -> None:
    import pickle

    q = parse_quantity("+1")
    with pytest.raises(AttributeError):
        q._text = "x"
    again = pickle.loads(pickle.dumps(q))
    assert again == q and str(again) == "+1" and again.identity() == q.identity()
