"""`spanscore report -o report.html`: one self-contained page, data escaped, each rate read
as its count, observed rate and the range of its true rate, SSR beside what it counts,
counts with their nouns agreeing; and, in a real headless Chromium, a table that sorts,
opens onto each case's failures and fits the page, and chart labels inside their chart,
clear of the curves and of each other.

The browser tests are skipped where Debian's `chromium` is missing, unless
SPANSCORE_REQUIRE_CHROMIUM=1 (as in CI, which installs it), where its absence fails."""

from __future__ import annotations

import html as html_module
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from spanscore.core.otlp_json import encode_request
from spanscore.core.wording import counted, plural
from spanscore.offline.suite_report import rate_parts
from spanscore.offline.svg_charts import Box, Series, line_chart, place_labels, text_width
from tests.support.chromium import chromium
from tests.support.scored_suite import DATASET, attempt, recipe, score_suite
from tests.support.spans import new_trace_id, request_of, span

ROOT = Path(__file__).resolve().parents[2]

# Oslo 4 of 5 (one asked for Bergen), Paris 1 of 3.
ATTEMPTS = [("oslo", "Oslo")] * 4 + [("oslo", "Bergen"), ("paris", "Paris"), ("paris", "Lyon"), ("paris", "Nice")]

# A suite as a user runs one: long case ids, several attempts per case (k up to 5), some
# failing with long explanations, some calling a tool no case expects (so SSR < 1).
LONG_ID = "weather/europe/scandinavia/oslo-forecast-with-unit-conversion-and-a-follow-up-question-about-tomorrow"
BERLIN = "berlin_multi_step_itinerary_planning_case_number_0042"
TROMSO = "Tromsø, Troms og Finnmark, Norway (the northern one, not the village of the same name)"
LONG_CASES = (
    DATASET
    + f"""
  - id: {LONG_ID}
    user_instruction: Weather in Tromsø
    expected_tool_calls: [{{tool: get_weather, parameters: [{{name: city, value: "{TROMSO}"}}]}}]
  - id: {BERLIN}
    user_instruction: Weather in Berlin
    expected_tool_calls: [{{tool: get_weather, parameters: [{{name: city, value: Berlin}}]}}]
"""
)
LONG_ATTEMPTS = (
    [("oslo", "Oslo", None)] * 4
    + [("oslo", "Bergen", None), ("oslo", "Oslo", "search_web")]
    + [("paris", "Paris", None), ("paris", "Lyon", None), ("paris", "Nice", None), ("paris", "Paris", "get_time")]
    + [(LONG_ID, "Tromsø, Troms, Norway, the one further south that keeps its long name going", None)] * 3
    + [(LONG_ID, TROMSO, None)] * 2
    + [(BERLIN, "Berlin", None)] * 5
    + [(BERLIN, "Hamburg", None)]
)


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


class Cards(HTMLParser):
    """The text of each headline card (`div.card`), as a reader sees it."""

    def __init__(self, html: str):
        super().__init__()
        self.cards: list[str] = []
        self._depth = 0  # of divs inside the card being read; 0 outside any card
        self._text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        if self._depth:
            self._depth += 1
        elif "card" in (dict(attrs).get("class") or "").split():
            self._depth, self._text = 1, []

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.cards.append(re.sub(r"\s+", " ", "".join(self._text)).strip())

    def handle_data(self, data):
        if self._depth:
            self._text.append(data)

    def card(self, title: str) -> str:
        (found,) = [text for text in self.cards if text.startswith(title)]
        return found


def visible_text(html: str) -> str:
    """The page's text without its style and script, each tag a space, spaces collapsed."""
    body = re.sub(r"<(style|script)>.*?</\1>", "", html, flags=re.S)
    return re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", body)))


def report_page(tmp_path: Path, scored: Path, *args: str) -> Path:
    html = tmp_path / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "spanscore", "report", str(scored), *args, "-o", str(html)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return html


def write_report(tmp_path: Path) -> Path:
    scored, dataset = score_suite(tmp_path, [attempt(case, city) for case, city in ATTEMPTS])
    return report_page(tmp_path, scored, "--dataset", str(dataset))


def write_long_report(tmp_path: Path) -> Path:
    scored, dataset = score_suite(
        tmp_path, [attempt(case, city, extra) for case, city, extra in LONG_ATTEMPTS], cases=LONG_CASES
    )
    return report_page(tmp_path, scored, "--dataset", str(dataset), "--k", "1,3,5")


def write_one_attempt_report(tmp_path: Path) -> Path:
    """One attempt that called the expected tool for the wrong city: TSR 0/1, SSR 1/1."""
    scored, dataset = score_suite(tmp_path, [attempt("oslo", "Bergen")])
    return report_page(tmp_path, scored, "--dataset", str(dataset))


def test_the_page_is_one_file_with_the_suite_s_figures(tmp_path):
    text = write_report(tmp_path).read_text()
    page = Page(text)
    assert page.fetched == []  # nothing to load: no CDN, fonts, images or style sheets
    assert "link" not in page.tags and text.count("<script>") == 1 and "<script src" not in text
    assert "5/8 = 0.625" in text  # TSR 5 of 8
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


def render_in_browser(browser: str, html: Path, actions: str, tmp_path: Path, width: int = 1400) -> str:
    """The page's DOM after `actions` ran in headless Chromium, offline, in a window `width` px wide."""
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
            f"--window-size={width},2000",
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


def test_counts_take_their_noun_in_the_singular_for_one():
    assert counted(1, "case") == "1 case"
    assert counted(0, "case") == "0 cases"
    assert counted(2, "attempt") == "2 attempts"
    assert plural(1, "attempt is", "attempts are") == "attempt is"
    assert plural(3, "attempt is", "attempts are") == "attempts are"


def test_a_rate_reads_as_its_count_observed_rate_and_range():
    assert rate_parts(0, 1, {"estimate": 0.0, "low": 0.0131, "high": 0.8321}) == ("0/1", "0.000", "0.013–0.832")
    assert rate_parts(5, 8, {"estimate": 0.625, "low": 0.3, "high": 0.86}) == ("5/8", "0.625", "0.300–0.860")
    # SSR's count is a sum of per-attempt rates: whole when it is, else to two decimals.
    assert rate_parts(20.0000001, 21, {"estimate": 20 / 21, "low": 0.7, "high": 0.99})[0] == "20/21"
    assert rate_parts(40 / 3, 21, {"estimate": 40 / 63, "low": 0.4, "high": 0.8})[0] == "13.33/21"


def test_text_width_is_the_sum_of_its_characters_estimates():
    # 0.4 em for a narrow glyph, 1.0 for a wide one, 0.78 for a capital, 0.64 otherwise.
    assert text_width("iW", 10) == pytest.approx(14.0)
    assert text_width("Ab", 11) == pytest.approx((0.78 + 0.64) * 11)


def test_a_box_knows_the_segments_through_it():
    box = Box(10, 10, 20, 20)
    assert box.crosses((0, 15), (30, 15))  # straight through
    assert box.crosses((15, 15), (40, 40))  # from inside
    assert not box.crosses((0, 0), (30, 5))  # above it
    assert not box.crosses((0, 12), (8, 30))  # beside it
    assert box.distance(25, 15) == pytest.approx(5.0)
    assert box.distance(23, 24) == pytest.approx(5.0)  # to the corner (20, 20)


AREA = Box(0, 0, 300, 300)


def test_a_label_with_nothing_in_its_way_sits_centred_above_its_point():
    assert place_labels([(100, 100)], [(40, 10)], AREA, gap=6) == [Box(80, 84, 120, 94)]


def test_a_label_moves_below_when_a_curve_runs_above_its_point():
    curve = [((0, 90), (300, 90))]
    assert place_labels([(100, 100)], [(40, 10)], AREA, segments=curve, gap=6) == [Box(80, 106, 120, 116)]


def test_a_label_stays_inside_the_chart():
    assert place_labels([(100, 5)], [(40, 10)], AREA, gap=6) == [Box(80, 11, 120, 21)]


def test_labels_of_close_points_sit_each_nearer_its_own_point():
    # Above (100, 100) would hold (100, 88): its label goes below; the other's goes above.
    boxes = place_labels([(100, 100), (100, 88)], [(40, 10), (40, 10)], AREA, gap=6)
    assert boxes == [Box(80, 106, 120, 116), Box(80, 72, 120, 82)]
    assert not boxes[0].intersects(boxes[1])


def test_a_label_with_no_clear_place_takes_the_nearest_inside_the_chart():
    # A curve down the middle of a narrow chart: every box inside it crosses the curve.
    boxes = place_labels([(30, 30)], [(40, 10)], Box(0, 0, 60, 60), segments=[((30, 0), (30, 60))], gap=6)
    assert boxes == [Box(10, 14, 50, 24)]


def test_a_legend_too_long_for_one_row_wraps_and_names_every_series():
    series = [Series(f"a series with a long name {i}", [(0, 0.1 * i), (1, 0.5)]) for i in range(6)]
    chart = line_chart(series, "x", "y", 1, width=520, height=260)
    for i in range(6):
        assert f"a series with a long name {i}</text>" in chart
    assert 'viewBox="0 0 520 ' in chart and 'viewBox="0 0 520 260"' not in chart  # taller by the rows


def test_one_k_shows_each_series_interval_as_a_bar_side_by_side_and_no_tick_beyond_it():
    chart = line_chart(
        [
            Series("pass@k", [(1, 0.5)], band=[(1, 0.1, 0.9)]),
            Series("pass^k", [(1, 0.5)], band=[(1, 0.1, 0.9)]),
        ],
        "k",
        "p",
        1,
        x_min=1,
        integer_x=True,
    )
    bars = re.findall(r'<line class="whisker" x1="([\d.]+)"', chart)
    assert len(bars) == 2 and bars[0] != bars[1]
    ticks = re.findall(r'text-anchor="middle" fill="#555">([^<]+)</text>', chart)
    assert ticks == ["1"]


def test_each_rate_shows_its_count_its_observed_rate_and_the_range_of_its_true_rate(tmp_path):
    cards = Cards(write_report(tmp_path).read_text())
    low, high = recipe(5, 8)
    tsr = cards.card("Task success rate (TSR)")
    assert "5/8 = 0.625" in tsr and f"true rate 95% credible {low:.3f}–{high:.3f}" in tsr
    assert "5 of 8 attempts succeeded" in tsr


def test_a_rate_of_none_or_all_says_why_it_sits_outside_its_range(tmp_path):
    cards = Cards(write_one_attempt_report(tmp_path).read_text())
    tsr, ssr = cards.card("Task success rate (TSR)"), cards.card("Step success rate (SSR)")
    assert "0/1 = 0.000" in tsr and "true rate 95% credible 0.013–0.832" in tsr
    assert "1/1 = 1.000" in ssr and "true rate 95% credible 0.172–0.987" in ssr
    for card in (tsr, ssr):
        assert "An observed 0 or 1 lies outside this range" in card


def test_ssr_says_what_it_counts_beside_its_figure(tmp_path):
    # The one attempt asked for the wrong city and still scores SSR 1/1: the card says why.
    ssr = Cards(write_one_attempt_report(tmp_path).read_text()).card("Step success rate (SSR)")
    assert "1/1 = 1.000" in ssr
    assert "a step is correct when it is an expected tool and did not fail" in ssr
    assert "Arguments are not checked" in ssr


def test_a_count_of_one_takes_the_singular(tmp_path):
    text = visible_text(write_one_attempt_report(tmp_path).read_text())
    assert "1 case 1 attempt " in text
    assert "0 of 1 attempt succeeded" in text and "averaged over 1 attempt with steps" in text
    assert "averaged over 1 case;" in text
    assert not re.search(r"\b1 (cases|attempts)\b", text)


def test_counts_other_than_one_take_the_plural(tmp_path):
    text = visible_text(write_report(tmp_path).read_text())
    assert "2 cases 8 attempts " in text and "averaged over 2 cases;" in text


def test_one_failed_attempt_beyond_the_twenty_shown_is_one(tmp_path):
    scored, _ = score_suite(tmp_path, [attempt("oslo", "Bergen") for _ in range(21)])
    text = report_page(tmp_path, scored).read_text()
    assert "1 more failed attempt is listed in the JSON summary" in text


def test_the_budget_leaves_out_a_reference_line_the_measured_one_covers(tmp_path):
    # Every step correct: measured ε = 0, and ε = 0.001 stays within 0.03 of it up to N = 20.
    text = write_one_attempt_report(tmp_path).read_text()
    budget = re.search(r'aria-label="reliability budget">.*?</svg>', text).group(0)
    assert "measured ε = 0.000" in budget and "ε = 0.001<" not in budget and "ε = 0.01<" in budget


def test_pass_at_1_and_pass_pow_1_have_no_columns_beside_the_success_rate(tmp_path):
    text = write_long_report(tmp_path).read_text()
    head = re.findall(r"<th data-col=\d+ tabindex=0>([^<]+)</th>", text)
    assert head == [
        "Case",
        "Attempts",
        "Successes",
        "Success rate",
        "pass@3",
        "pass@5",
        "pass^3",
        "pass^5",
        "Progress AUC",
        "Trajectory similarity",
    ]


LAYOUT = """
(function () {
  var out = {scrolls: [], svgs: []};
  document.querySelectorAll('div.scroll').forEach(function (d) {
    out.scrolls.push([d.scrollWidth, d.clientWidth]);
  });
  document.querySelectorAll('svg').forEach(function (svg) {
    var vb = svg.viewBox.baseVal, r = svg.getBoundingClientRect();
    var sx = vb.width / r.width, sy = vb.height / r.height, texts = [], lines = [];
    svg.querySelectorAll('text').forEach(function (t) {
      var b = t.getBoundingClientRect();
      if (b.width) texts.push([t.textContent, [(b.left - r.left) * sx, (b.top - r.top) * sy,
                                               (b.right - r.left) * sx, (b.bottom - r.top) * sy]]);
    });
    svg.querySelectorAll('polyline').forEach(function (line) {
      var points = [];
      for (var i = 0; i < line.points.numberOfItems; i++) {
        var p = line.points.getItem(i); points.push([p.x, p.y]);
      }
      lines.push(points);
    });
    out.svgs.push({name: svg.getAttribute('aria-label'), size: [vb.width, vb.height], texts: texts, lines: lines});
  });
  var pre = document.createElement('pre'); pre.id = 'layout'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


def layout_in_browser(browser: str, html: Path, tmp_path: Path, width: int) -> dict:
    """The scroll containers' widths and each chart's text boxes (in its viewBox units) and curves."""
    dom = render_in_browser(browser, html, LAYOUT, tmp_path, width=width)
    return json.loads(html_module.unescape(re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S).group(1)))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """layouts(page, width): the layout of the long suite's or the one attempt's page, each made once."""
    browser, made = chromium(), {}

    def layout(page: str, width: int) -> dict:
        if (page, width) not in made:
            tmp_path = tmp_path_factory.mktemp("layout")
            html = write_long_report(tmp_path) if page == "long suite" else write_one_attempt_report(tmp_path)
            made[page, width] = layout_in_browser(browser, html, tmp_path, width)
        return made[page, width]

    return layout


PAGES = pytest.mark.parametrize("page", ["long suite", "one attempt"])
WIDTHS = pytest.mark.parametrize("width", [1400, 900])


@PAGES
@WIDTHS
def test_in_chromium_the_tables_fit_the_page(layouts, page, width):
    layout = layouts(page, width)
    assert layout["scrolls"]  # the cases table is in one
    for scroll_width, client_width in layout["scrolls"]:
        assert scroll_width <= client_width


@PAGES
@WIDTHS
def test_in_chromium_every_chart_text_is_inside_its_chart(layouts, page, width):
    for svg in layouts(page, width)["svgs"]:
        w, h = svg["size"]
        for text, (x0, y0, x1, y1) in svg["texts"]:
            assert x0 >= -0.5 and y0 >= -0.5 and x1 <= w + 0.5 and y1 <= h + 0.5, (svg["name"], text)


@PAGES
@WIDTHS
def test_in_chromium_the_budget_s_labels_are_clear_of_each_other_and_of_the_curves(layouts, page, width):
    (budget,) = [svg for svg in layouts(page, width)["svgs"] if svg["name"] == "reliability budget"]
    labels = [(text, Box(*box)) for text, box in budget["texts"] if re.match(r"[\d.]+ steps →|measured TSR", text)]
    assert len(labels) == 2
    (first, a), (second, b) = labels
    assert not a.intersects(b), (first, second)
    for text, box in labels:
        for line in budget["lines"]:
            for p, q in zip(line, line[1:]):
                assert not box.crosses(tuple(p), tuple(q)), (text, p, q)
