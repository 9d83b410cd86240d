"""EDGE: one self-contained HTML page per capture, to see it rather than read it.

Input: record batches of every table, as a read streams them (`Report.add`), and the files.
Output: an HTML document (`Report.html`).
Rule: `collect` gathers (bounded, whatever the capture's size), `html` renders the sections
(`subscriptions` the per-subscription one), `plots` draws the figures; report.css and
report.js are package data, inlined in the page.
"""

from __future__ import annotations

from dissector.frontends.report.collect import REPORT_TABLES, ReportData
from dissector.frontends.report.html import page

__all__ = ["REPORT_TABLES", "Report", "ReportData", "page"]


class Report(ReportData):
    """What the page shows, gathered from record batches as they come; `html()` renders it."""

    def html(self) -> str:
        return page(self)
