"""Every runnable example in README.md and docs/*.md does what the page says.

See tests/docs/mdblocks.py for the marker convention. One test per file: the blocks of a page
run in order and share its background servers, like a reader following it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs import mdblocks, runner

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_pages_follow_the_convention() -> None:
    # Parsing raises on unknown directive keys, directives above non-console blocks, skip
    # without a reason, and unterminated fences.
    for page in PAGES:
        mdblocks.blocks(page)


@pytest.mark.parametrize("page", [p for p in PAGES if p.exists()], ids=_page_id)
def test_page_examples(page: Path, tmp_path: Path) -> None:
    page_blocks = mdblocks.blocks(page)
    if not page_blocks:
        pytest.skip(f"{_page_id(page)} has no console examples")
    sandbox = runner.make_sandbox(tmp_path)
    run = runner.FileRun(sandbox, runner.environment(tmp_path))
    try:
        for block in page_blocks:
            run.run_block(block)
    finally:
        run.close()


def _run_by(reason: str) -> Path | None:
    """The test file a skip reason names as the one that runs the block (``tests/...py``)."""
    for word in re.findall(r"tests/[\w/]+(?:\.py)?", reason):
        path = ROOT / word
        if path.exists():
            return path
    return None


def test_every_console_command_is_checked() -> None:
    # Skips are for what cannot run inside the suite (the suite itself); keep them few and
    # visible. A block another test runs (its skip reason names the test) is checked there.
    skipped = [
        f"{b.ident} ({b.options['skip']})"
        for page in PAGES
        for b in mdblocks.blocks(page)
        if "skip" in b.options and _run_by(b.options["skip"]) is None
    ]
    assert len(skipped) <= 3, f"too many skipped examples: {skipped}"
