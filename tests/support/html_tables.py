"""The tables of a `pulsar-dissect report` page, as text: what tests compare with `summary`.

Input: a capture and where to write its report. Output: table id -> rows -> cells' text.
Rule: the page is made by the command as a user runs it (tests.support.cli).
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from tests.support.cli import cli


class _Tables(HTMLParser):
    """The cells' text of each table with an id, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id")
            if self._table:
                self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def page_tables(page: str) -> dict[str, list[list[str]]]:
    """The tables with an id of an HTML page's text."""
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def report_tables(path: Path, out: Path) -> dict[str, list[list[str]]]:
    res = cli("report", str(path), "-o", str(out))
    assert res.returncode == 0, res.stderr
    return page_tables(out.read_text(encoding="utf-8"))
