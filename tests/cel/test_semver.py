"""``model.semver``: blang/semver v4 strict parsing, CEL normalisation, precedence."""

from __future__ import annotations

import itertools

import pytest

from dra_solver.model.semver import Semver, SemverError, parse_semver


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("1.2.3", (1, 2, 3, (), ())),
        ("0.0.0", (0, 0, 0, (), ())),
        ("1.0.0-alpha", (1, 0, 0, ("alpha",), ())),
        ("1.0.0-alpha.1", (1, 0, 0, ("alpha", "1"), ())),
        ("1.0.0-0.3.7", (1, 0, 0, ("0", "3", "7"), ())),
        ("1.0.0-x.7.z.92", (1, 0, 0, ("x", "7", "z", "92"), ())),
        ("1.0.0+20130313144700", (1, 0, 0, (), ("20130313144700",))),
        ("1.0.0-beta+exp.sha.5114f85", (1, 0, 0, ("beta",), ("exp", "sha", "5114f85"))),
        ("1.0.0+build-1", (1, 0, 0, (), ("build-1",))),
        ("18446744073709551615.0.0", ((1 << 64) - 1, 0, 0, (), ())),
    ],
)
def test_parse(text: str, parts: tuple[object, ...]) -> None:
    v = parse_semver(text)
    assert (v.major, v.minor, v.patch, v.pre, v.build) == parts
    assert str(v) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Version string empty"),
        ("1.0", "No Major.Minor.Patch elements found"),
        ("v1.0.0", 'Invalid character(s) found in major number "v1"'),
        ("01.0.0", 'Major number must not contain leading zeroes "01"'),
        ("1.01.0", 'Minor number must not contain leading zeroes "01"'),
        ("1.0.01", 'Patch number must not contain leading zeroes "01"'),
        ("1.a.0", 'Invalid character(s) found in minor number "a"'),
        ("1.0.x", 'Invalid character(s) found in patch number "x"'),
        ("1..0", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.0.0-", "Prerelease is empty"),
        ("1.0.0-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        ("1.0.0-a_b", 'Invalid character(s) found in prerelease "a_b"'),
        ("1.0.0+", "Build meta data is empty"),
        ("1.0.0+a_b", 'Invalid character(s) found in build meta data "a_b"'),
        ("18446744073709551616.0.0", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
        ("200K", "No Major.Minor.Patch elements found"),
    ],
)
def test_parse_errors_are_blangs(text: str, message: str) -> None:
    with pytest.raises(SemverError) as err:
        parse_semver(text)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("text", "normalized"),
    [("v1.0.0", "1.0.0"), ("1.0", "1.0.0"), ("1", "1.0.0"), ("01.01.01", "1.1.1"), ("v1.2", "1.2.0"),
     ("1.0.0-rc.1", "1.0.0-rc.1")],
)
def test_normalize(text: str, normalized: str) -> None:
    assert str(parse_semver(text, normalize=True)) == normalized


def test_normalize_refuses_short_prerelease() -> None:
    with pytest.raises(SemverError, match="short version cannot contain PreRelease/Build meta data"):
        parse_semver("1.0-rc", normalize=True)


def test_precedence() -> None:
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
               "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"]
    versions = [parse_semver(v) for v in ordered]
    for a, b in itertools.pairwise(versions):
        assert a < b and b > a and a.compare(b) == -1 and b.compare(a) == 1
    assert sorted(reversed(versions)) == versions


def test_build_metadata_does_not_count() -> None:
    a, b = parse_semver("1.0.0+a"), parse_semver("1.0.0+b")
    assert a == b and hash(a) == hash(b) and a.compare(b) == 0
    assert a.precedence_key() == "1.0.0" and str(a) == "1.0.0+a"
    assert Semver.parse("1.2.3") == Semver(1, 2, 3)
