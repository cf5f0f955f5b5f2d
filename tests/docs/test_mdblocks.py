"""The docs-example reader itself: commands, shown output, directives, loose matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import cluster_check, mdblocks


def _page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_commands_output_and_directives(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "Intro\n\n<!-- doctest: exit=1 timeout=5 -->\n\n```console\n$ echo a \\\n  b\na b\n"
        "$ false\n```\n\n```shell\n$ not run\n```\n",
    )
    (block,) = mdblocks.blocks(page)
    assert block.options == {"exit": "1", "timeout": "5"}
    assert [c.text for c in block.commands] == ["echo a \\\n  b", "false"]
    assert block.commands[0].shown == ("a b",)


def test_directive_applies_only_to_the_next_block(tmp_path: Path) -> None:
    page = _page(tmp_path, "<!-- doctest: exit=2 -->\nprose\n```console\n$ true\n```\n")
    (block,) = mdblocks.blocks(page)
    assert block.options == {}


@pytest.mark.parametrize(
    "text",
    [
        "<!-- doctest: bogus -->\n```console\n$ true\n```\n",
        "<!-- doctest: skip -->\n```console\n$ true\n```\n",
        "<!-- doctest: exit=1 -->\n```yaml\na: 1\n```\n",
        "```console\noutput first\n$ true\n```\n",
        "```console\n$ true\n",
    ],
)
def test_rejects_broken_pages(tmp_path: Path, text: str) -> None:
    with pytest.raises(mdblocks.DocSyntaxError):
        mdblocks.blocks(_page(tmp_path, text))


def test_loose_output_matching() -> None:
    actual = "header\nallocated gpu-0 in 12ms\nfooter\n"
    assert mdblocks.shown_matches(("allocated gpu-0 in ...ms", "...", "footer"), actual) is None
    assert mdblocks.shown_matches(("footer", "header"), actual) == "header"


def test_cluster_commands_are_checked_against_the_manifests() -> None:
    assert cluster_check.check("kubectl apply -k deploy/overlays/dev") is None
    assert "does not render" in (cluster_check.check("kubectl apply -k deploy/overlays/nope") or "")
    assert cluster_check.check("kubectl -n dra-solver rollout status deployment/dra-solver") is None
    assert "no Deployment" in (
        cluster_check.check("kubectl -n dra-solver rollout status deploy/missing") or ""
    )
    assert cluster_check.check(f"kind load docker-image {cluster_check.dev_image()}") is None
    assert "dev overlay" in (cluster_check.check("kind load docker-image other:1") or "")
    assert "no offline check" in (cluster_check.check("terraform apply") or "")


def test_helm_commands_render_the_chart_with_their_values() -> None:
    assert cluster_check.check("helm install dra-solver deploy/helm/dra-solver --set policy=spread") is None
    assert "logFormat: Unsupported value" in (
        cluster_check.check("helm install dra-solver deploy/helm/dra-solver --set logFormat=xml") or ""
    )
    assert "not the chart" in (cluster_check.check("helm install dra-solver deploy/base") or "")
    assert cluster_check.check("helm uninstall dra-solver") is None
