"""The README, the bench README and the changelog hold together with the repository.

They say the two commands, link files that exist, quote a bench summary the repository keeps,
and name the release `pyproject.toml` and the API carry.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, ROOT / "bench" / "README.md", ROOT / "CHANGELOG.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def test_the_readme_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines()]
    assert commands == ["bash scripts/dev.sh", "bash scripts/test.sh"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_names_a_file_of_the_repository(doc: Path) -> None:
    targets = [t for t in LINK.findall(doc.read_text(encoding="utf-8")) if "://" not in t]
    missing = [t for t in targets if not (doc.parent / t).exists()]
    assert missing == []


def test_the_performance_table_quotes_a_summary_the_repository_keeps() -> None:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("\n## Performance", 1)[1].split("\n## ", 1)[0]
    (summary,) = set(re.findall(r"bench/results/(all-[\d-]+\.md)", section))
    assert (ROOT / "bench" / "results" / summary).is_file()
    kept = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "bench/results/*" in kept
    assert f"!bench/results/{summary}" in kept
    run = summary.removeprefix("all-").removesuffix(".md")
    bench_table = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert f"Run `{run}`" in bench_table, "bench/README.md's table is another run than the README's"


def test_the_release_is_the_same_in_pyproject_the_changelog_and_the_api() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert headings[0] == "Unreleased"
    assert headings[1] == version, "the newest release in CHANGELOG.md is not pyproject's version"
    api = (ROOT / "api" / "main.py").read_text(encoding="utf-8")
    assert f'version="{version}"' in api
