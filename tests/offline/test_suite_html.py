"""`spanscore report -o report.html`: one self-contained page, data escaped, and (in a
real headless Chromium) a table that sorts and opens onto each case's failures.

The browser test is skipped where Debian's `chromium` is missing, unless
SPANSCORE_REQUIRE_CHROMIUM=1 (as in CI, which installs it), where its absence fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from spanscore.core.otlp_json import encode_request
from tests.support.scored_suite import attempt, score_suite
from tests.support.spans import new_trace_id, request_of, span

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_ENV = "SPANSCORE_REQUIRE_CHROMIUM"

# Oslo 4 of 5 (one asked for Bergen), Paris 1 of 3.
ATTEMPTS = [("oslo", "Oslo")] * 4 + [("oslo", "Bergen"), ("paris", "Paris"), ("paris", "Lyon"), ("paris", "Nice")]


class Page(HTMLParser):
    """What a reader of the page sees and what the browser would fetch."""

    def __init__(self, html: str):
        super().__init__()
        self.fetched: list[str] = []  # every src/href that is not a fragment
        self.tags: list[str] = []
        self.cases: list[tuple[str, bool]] = []  # (case cell text, its detail row hidden)
        self._row: str | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        values = dict(attrs)
        for name in ("src", "href", "xlink:href", "action", "poster"):
            if values.get(name) and not values[name].startswith("#"):
                self.fetched.append(values[name])
        if tag == "tr":
            classes = (values.get("class") or "").split()
            if "case" in classes:
                self._row, self._cell = "case", []
            elif "detail" in classes and self.cases:
                name, _ = self.cases[-1]
                self.cases[-1] = (name, "hidden" in values)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._row == "case" and self._cell is not None:
            self.cases.append(("".join(self._cell).replace("▸", "").replace("▾", "").strip(), True))
            self._row, self._cell = None, None


def write_report(tmp_path: Path) -> Path:
    scored, dataset = score_suite(tmp_path, [attempt(case, city) for case, city in ATTEMPTS])
    html = tmp_path / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "spanscore", "report", str(scored), "--dataset", str(dataset), "-o", str(html)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return html


def test_the_page_is_one_file_with_the_suite_s_figures(tmp_path):
    text = write_report(tmp_path).read_text()
    page = Page(text)
    assert page.fetched == []  # nothing to load: no CDN, fonts, images or style sheets
    assert "link" not in page.tags and text.count("<script>") == 1 and "<script src" not in text
    assert "62.5%" in text  # TSR 5 of 8
    assert "5 of 8 attempts succeeded" in text
    assert [name for name, _ in page.cases] == ["oslo", "paris"]
    for section in ("pass@k and pass^k, suite", "Reliability budget", "Score distributions", "Cases"):
        assert section in text
    # Every failed attempt's failing checks are in the page, behind its case's row.
    assert text.count("Failed attempt ") == 3
    assert "missed get_weather: get_weather called with city=&#x27;Lyon&#x27;" in text
    assert text.count("<svg") >= 2 + 3 + 2  # suite charts, 3 distributions, a curve per case


def test_text_from_the_spans_is_escaped(tmp_path):
    hostile = '<img src=x onerror="alert(1)">'
    path = tmp_path / "scored.jsonl"
    path.write_text(
        encode_request(
            request_of(
                [
                    span(
                        new_trace_id(),
                        "</td><script>alert(2)</script>",
                        attributes={
                            "eval.case.id": hostile,
                            "eval.success.score": 0.0,
                            "eval.success.label": "fail",
                            "eval.success.explanation": "</li><script>alert(3)</script>",
                        },
                    )
                ]
            )
        )
        + "\n"
    )
    html = tmp_path / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "spanscore", "report", str(path), "-o", str(html)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    page = Page(html.read_text())
    assert page.fetched == [] and "img" not in page.tags
    assert page.tags.count("script") == 1
    assert page.cases == [(hostile, True)]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but chromium is not installed (apt-get install chromium)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return found


def render_in_browser(browser: str, html: Path, actions: str, tmp_path: Path) -> str:
    """The page's DOM after `actions` ran in headless Chromium, offline."""
    acted = tmp_path / "acted.html"
    acted.write_text(html.read_text().replace("</body>", f"<script>{actions}</script></body>"))
    result = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-extensions",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--dump-dom",
            acted.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_in_chromium_the_cases_sort_and_open(tmp_path):
    browser = chromium()
    html = write_report(tmp_path)
    loaded = Page(render_in_browser(browser, html, "", tmp_path))
    assert loaded.cases == [("oslo", True), ("paris", True)]
    # Sort by success rate ascending (one click on its header), then open the first row.
    actions = (
        "document.querySelectorAll('table.cases th')[3].click();document.querySelector('table.cases tr.case').click();"
    )
    acted = Page(render_in_browser(browser, html, actions, tmp_path))
    assert acted.cases == [("paris", False), ("oslo", True)]
    # A second click sorts descending.
    actions = (
        "var th = document.querySelectorAll('table.cases th')[3]; th.click(); th.click();"
        "document.body.dataset.sorted = th.getAttribute('aria-sort');"
    )
    dom = render_in_browser(browser, html, actions, tmp_path)
    assert Page(dom).cases == [("oslo", True), ("paris", True)]
    assert 'data-sorted="descending"' in dom


def test_a_case_shows_its_first_twenty_failures_and_points_to_the_rest(tmp_path):
    scored, dataset = score_suite(tmp_path, [attempt("oslo", "Bergen") for _ in range(23)])
    html = tmp_path / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "spanscore", "report", str(scored), "-o", str(html)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    text = html.read_text()
    assert text.count("Failed attempt ") == 20 and "Failed attempt 20 of 23" in text
    assert "3 more failed attempts are listed in the JSON summary" in text
