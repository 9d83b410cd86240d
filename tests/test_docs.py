"""The documentation cannot drift (issue 26): README.md and docs/*.md.

- The generated blocks (tables and columns, anomaly codes, the CLI reference, the package
  layout, the README's example outputs) equal what scripts/gen_docs.py makes now from the
  registries, the parsers, the package and the CLI run on the samples: `make docs` fixes
  a failure here.
- Every relative link (a file, and a heading's anchor) points to something that exists.
- The README's Python example runs.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _gen_docs() -> ModuleType:
    return load_script("gen_docs")


def test_generated_docs_are_fresh() -> None:
    assert _gen_docs().stale() == [], "generated docs are stale: run `make docs`"


def test_a_stale_block_is_detected_and_remade() -> None:
    gen = _gen_docs()
    path = ROOT / "docs" / "tables.md"
    text = path.read_text(encoding="utf-8")
    edited = text.replace("| `conn_id` |", "| `conn_idx` |", 1)
    assert edited != text
    makers = gen.blocks()
    assert gen.render(edited, makers, {}) == gen.render(text, makers, {}) == text


def test_every_block_has_its_place_and_every_place_its_block(tmp_path: Path) -> None:
    gen = _gen_docs()
    makers = {"tables:frames": lambda: "", "tables:new_table": lambda: ""}
    placed = tmp_path / "doc.md"
    text = "<!-- BEGIN GENERATED: tables:frames -->\n<!-- END GENERATED: tables:frames -->\n"
    with pytest.raises(SystemExit, match="blocks in no file: tables:new_table"):
        gen.check_names({placed: text}, makers)
    unknown = text.replace("tables:frames", "tables:gone")
    with pytest.raises(SystemExit, match="no block 'tables:gone'"):
        gen.check_names({placed: unknown}, makers)


def test_every_table_column_and_command_has_its_heading() -> None:
    from dissector.frontends.cli import build_parser
    from dissector.tables.schema import TABLES

    tables = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    for name, table in TABLES.items():
        assert f"\n## {name}\n" in tables
        for column in table.columns:
            assert f"| `{column.name}` | " in tables
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in sub.choices:
        assert f"\n### `pulsar-dissect {command}`\n" in cli


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it: lower case, punctuation dropped (hyphens and
    underscores kept), spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in HEADING.findall(text):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    return LINK.findall(text)


def test_slugs_are_githubs() -> None:
    assert slug("`pulsar-dissect read`") == "pulsar-dissect-read"
    assert slug("Which connections are Pulsar") == "which-connections-are-pulsar"
    assert slug("Outputs never destroy inputs, and failures are never silent") == (
        "outputs-never-destroy-inputs-and-failures-are-never-silent"
    )
    assert slug("TLS (`pulsar+ssl://`)") == "tls-pulsarssl"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_something(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file, _, anchor = target.partition("#")
        where = (doc.parent / file).resolve() if file else doc
        missing = not where.exists()
        if missing or (anchor and where.suffix == ".md" and anchor not in anchors(where)):
            broken.append(target)
    assert broken == [], f"{doc.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_docs_are_linked_from_the_readme() -> None:
    linked = {(ROOT / t).resolve() for t in links(ROOT / "README.md")}
    assert set(DOCS[1:]) <= linked


def test_the_readme_python_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.S | re.M)
    assert len(blocks) == 1
    monkeypatch.chdir(ROOT)  # the example names the bundled samples from the checkout
    exec(compile(blocks[0], "README.md", "exec"), {})


def test_the_findings_page_gives_every_code_its_evidence_and_sources() -> None:
    """docs/findings.md (block `finding-reference`): one section per code of the registry,
    in code order, each with its wire evidence and at least one source."""
    from dissector.findings import REGISTRY, SOURCES

    text = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    sections = re.findall(r"^### `([\w.]+)`\n\n((?:- .*\n)+)", text, re.M)
    assert [code for code, _ in sections] == sorted(REGISTRY)
    for code, body in sections:
        assert f"- **wire evidence**: {SOURCES[code].evidence}\n" in body, code
        assert SOURCES[code].sources, code
        assert f"- **usual causes**: {REGISTRY[code].hint}\n" in body, code
    links = re.findall(r"\[([\w.-]+/[\w.-]+)#(\d+)\]\(https://github\.com/([^)]+)\)", text)
    assert links and all(url == f"{repo}/issues/{n}" for repo, n, url in links)
