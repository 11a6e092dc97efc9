"""`spanscore agree -o agree.html`: one self-contained page with the same figures as
`--json` (κ, accuracy, the confusion counts), hostile notes and explanations shown as
text, the first 20 disagreements of N; and, in a real headless Chromium at 1,400 and
400 px wide, a page that never scrolls sideways, its headline and confusion table in
view, with a screenshot of each width (/tmp/agree-desktop.png, /tmp/agree-narrow.png).

The browser tests drive Chromium over its DevTools pipe (one start for both widths): its
command line cannot make a window narrower than 500 px, a device-metrics override can.
They are skipped where Debian's `chromium` is missing, unless SPANSCORE_REQUIRE_CHROMIUM=1
(as in CI, which installs it), where its absence fails."""

from __future__ import annotations

import html as html_module
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from spanscore.cli import main
from spanscore.offline.agreement_report import number, with_interval
from tests.support.agreement_files import scored_root, trace_id, write_labels, write_scored
from tests.support.chromium import chromium
from tests.support.devtools import DevTools

METRIC, SCALED = "task_completion", "plan_quality"
HOSTILE_NOTE = "<script>alert(1)</script></td> it booked the wrong day"
HOSTILE_EXPLANATION = "</td></tr><img src=x onerror=alert(2)> the booking looks complete"
HOSTILE_SPAN = "</td><b>invoke_agent</b> booker"
HOSTILE_ANNOTATOR = "<i>mallory</i>"
LONG_NOTE = "the agent asked for the date twice and then answered about another city entirely; " * 20
LONG_EXPLANATION = "Step_" * 150 + " and so the task is complete"  # one 750-character word
SCREENSHOTS = {1400: Path("/tmp/agree-desktop.png"), 400: Path("/tmp/agree-narrow.png")}


def person(i: int) -> str:
    return "fail" if i % 3 == 0 else "pass"


def judge_score(i: int) -> float:
    """Agreeing with alice from trace 24 on, disagreeing on traces 1-23; trace 3 farthest apart."""
    if i == 3:
        return 0.99
    if i <= 23:
        return 0.05 + (i % 5) * 0.08 if person(i) == "pass" else 0.55 + (i % 5) * 0.08
    return 0.6 + (i % 4) * 0.1 if person(i) == "pass" else 0.1 + (i % 4) * 0.1


def build_inputs(root: Path) -> tuple[Path, Path]:
    """60 traces of `METRIC` labelled by alice (23 disagreeing with the judge, hostile and
    long texts among them), 20 of them by bob too (3 more disagreements), the judge asked
    three times on 10; and 12 traces of `SCALED` scored 1-5 by carol."""
    spans, rows = [], []
    for i in range(1, 61):
        explanation = {3: HOSTILE_EXPLANATION, 5: LONG_EXPLANATION}.get(i, f"judged trace {i}")
        score = judge_score(i)
        trials = f"{max(score - 0.1, 0):.2f},{score:.2f},{min(score + 0.1, 1):.2f}" if i <= 10 else None
        name = HOSTILE_SPAN if i == 3 else "invoke_agent helper"
        spans.append(scored_root(trace_id(i), METRIC, score, explanation=explanation, trial_scores=trials, name=name))
        note = {3: HOSTILE_NOTE, 9: LONG_NOTE}.get(i, f"note {i}" if i % 2 else "")
        annotator = HOSTILE_ANNOTATOR if i == 3 else "alice"
        row = {"trace_id": trace_id(i), "metric": METRIC, "label": person(i), "annotator": annotator, "note": note}
        rows.append(row)
        if 31 <= i <= 50:
            flipped = {"pass": "fail", "fail": "pass"}[person(i)] if i in (35, 40, 45) else person(i)
            rows.append({"trace_id": trace_id(i), "metric": METRIC, "label": flipped, "annotator": "bob"})
    for i in range(101, 113):
        points = 1 + i % 5
        judged = min(1.0, max(0.0, (points - 1) / 4 + (0.0, 0.25, -0.25, 0.0)[i % 4]))
        spans.append(scored_root(trace_id(i), SCALED, judged, explanation=f"plan {i}", name="plan"))
        rows.append({"trace_id": trace_id(i), "metric": SCALED, "score": points, "scale": "1-5", "annotator": "carol"})
    return write_scored(root / "scored.jsonl", spans), write_labels(root / "labels.jsonl", rows)


def run_agree(root: Path, scored: Path, labels: Path) -> tuple[str, dict]:
    """The page and the `--json` document of one real `spanscore agree` run."""
    page, document = root / "agree.html", root / "agree.json"
    code = main(["agree", str(scored), "--labels", str(labels), "--json", str(document), "-o", str(page)])
    assert code == 0
    return page.read_text(encoding="utf-8"), json.loads(document.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement(tmp_path_factory) -> tuple[Path, str, dict]:
    """(the page's path, its text, the `--json` document) for `build_inputs`, made once."""
    root = tmp_path_factory.mktemp("agree")
    text, document = run_agree(root, *build_inputs(root))
    return root / "agree.html", text, document


class Page(HTMLParser):
    """What a reader of (part of) the page sees and what the browser would fetch: the
    tags, every src/href, the text of each headline card, each table's rows of cells."""

    def __init__(self, html: str):
        super().__init__()
        self.fetched: list[str] = []
        self.tags: list[str] = []
        self.cards: list[str] = []
        self.tables: list[dict] = []  # {"class": ..., "rows": [(part, [cell text, ...])]}
        self._card_depth = 0
        self._card_text: list[str] = []
        self._part = ""
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.handle_data(" ")  # a tag parts words, as the browser's layout does
        self.tags.append(tag)
        values = dict(attrs)
        for name in ("src", "href", "xlink:href", "action", "poster"):
            if values.get(name) and not values[name].startswith("#"):
                self.fetched.append(values[name])
        if tag == "div":
            if self._card_depth:
                self._card_depth += 1
            elif "card" in (values.get("class") or "").split():
                self._card_depth, self._card_text = 1, []
        elif tag == "table":
            self.tables.append({"class": values.get("class") or "", "rows": []})
        elif tag in ("thead", "tbody", "tfoot"):
            self._part = tag
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append((self._part, []))
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        self.handle_data(" ")
        if tag == "div" and self._card_depth:
            self._card_depth -= 1
            if not self._card_depth:
                self.cards.append(re.sub(r"\s+", " ", "".join(self._card_text)).strip())
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1][1].append(re.sub(r"\s+", " ", "".join(self._cell)).strip())
            self._cell = None

    def handle_data(self, data):
        if self._card_depth:
            self._card_text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def card(self, title: str) -> str:
        (found,) = [text for text in self.cards if text.startswith(title)]
        return found

    def table(self, css_class: str) -> list[dict]:
        return [t for t in self.tables if css_class in t["class"].split()]


def visible_text(html: str) -> str:
    """The page's text without its style, each tag a space, spaces collapsed."""
    body = re.sub(r"<(style|script)>.*?</\1>", "", html, flags=re.S)
    return re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", body)))


def groups(text: str) -> list[str]:
    """The page's part for each group, in the page's order (the footer ends the last)."""
    return text.split("<section class=group ")[1:]


def confusion_of(table: dict) -> dict[str, dict[str, int]]:
    """A confusion table as `{people's class: {judge's class: count}}`, totals left out."""
    (_, head), *rows = table["rows"]
    columns = head[1:-1]
    assert head[-1] == "total"
    body = [cells for part, cells in rows if part == "tbody"]
    return {cells[0]: dict(zip(columns, (int(c.replace(",", "")) for c in cells[1:-1]))) for cells in body}


def test_the_page_holds_the_figures_of_the_json(agreement):
    _, text, document = agreement
    results = document["results"]
    assert [r["metric"] for r in results] == [SCALED, METRIC]
    parts = groups(text)
    assert len(parts) == len(results)
    for part, result in zip(parts, results):
        page = Page(part)
        kappa = page.card("κ, the judge vs people")
        assert number(result["kappa"]["estimate"]) in kappa
        assert f"[{number(result['kappa']['low'])}, {number(result['kappa']['high'])}]" in kappa
        assert result["kappa_kind"] in kappa
        accuracy = page.card("Accuracy")
        assert number(result["accuracy"]["estimate"]) in accuracy
        agreeing = sum(result["confusion"][c][c] for c in result["confusion"])
        assert f"{agreeing} of {result['n']} labels in the judge's class" in accuracy
        f1 = page.card("F1 of the failing class")
        assert number(result["f1"]["estimate"]) in f1
        assert with_interval(result["precision"]) in f1 and with_interval(result["recall"]) in f1
        assert ("Spearman's ρ" in " ".join(page.cards)) == (result["spearman"] is not None)
        if result["spearman"] is not None:
            assert number(result["spearman"]["estimate"]) in page.card("Spearman's ρ")
        assert f"{result['n']} labels on {result['traces']} traces" in page.card(str(result["n"]))
        tables = page.table("confusion")
        assert confusion_of(tables[0]) == result["confusion"]
        if result["scale_confusion"] is not None:
            assert confusion_of(tables[1]) == result["scale_confusion"]
        else:
            assert len(tables) == 1
        words = visible_text(part)
        best = result["best_threshold"]
        assert f"configured {number(best['configured'])} (κ {number(best['kappa_at_configured'])})" in words
        assert f"best match with people {with_interval(best)} (κ {number(best['kappa'])})" in words
    scaled, labelled = results
    assert scaled["scale_confusion"] is not None and scaled["spearman"] is not None
    # People with each other and the judge with itself, on the 60 traces.
    words = visible_text(parts[1])
    human = labelled["human_kappa"]
    assert human is not None and labelled["consistency"] is not None
    assert f"people vs people κ {with_interval(human)} on {human['items']} items labelled twice or more" in words
    assert f"the judge vs people κ {with_interval(labelled['kappa'])}" in words
    assert f"trials split pass/fail on {labelled['consistency']['split_rate']:.0%} of items" in words
    assert "no item was labelled by two people" in visible_text(parts[0])


def test_the_header_names_the_files_and_the_method_closes_the_page(agreement):
    path, text, document = agreement
    words = visible_text(text)
    assert "<header><h1>Judge agreement</h1>" in text
    assert re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC by spanscore \S+", words)
    assert str(path.parent / "scored.jsonl") in words
    assert words.rindex(document["method"]) > words.rindex("Disagreements, farthest apart first")
    # Two groups: a table of them first, each linking to its section.
    overview = Page(text).table("overview")[0]["rows"]
    assert [cells[0] for part, cells in overview if part == "tbody"] == [
        f"{SCALED} · judge-model · revision aaaaaaaaaaaa",
        f"{METRIC} · judge-model · revision aaaaaaaaaaaa",
    ]


def test_hostile_text_shows_as_text(agreement):
    _, text, document = agreement
    page = Page(text)
    assert "script" not in page.tags and "img" not in page.tags and "i" not in page.tags
    words = visible_text(text)
    for hostile in (HOSTILE_NOTE, HOSTILE_EXPLANATION, HOSTILE_SPAN, HOSTILE_ANNOTATOR):
        assert hostile in words
    # The `</td>`s in the data closed no cell: every row has its eight.
    assert all(len(cells) == 8 for table in page.table("disagreements") for _, cells in table["rows"])
    (table,) = Page(groups(text)[1]).table("disagreements")
    first = table["rows"][1][1]
    assert first[1] == trace_id(3) and HOSTILE_SPAN in first[2] and first[4] == HOSTILE_EXPLANATION
    assert first[6] == HOSTILE_ANNOTATOR and first[7] == HOSTILE_NOTE
    assert document["results"][1]["disagreements"][0]["note"] == HOSTILE_NOTE


def test_the_first_twenty_disagreements_of_n_are_shown(agreement):
    _, text, document = agreement
    labelled = document["results"][1]
    assert len(labelled["disagreements"]) == 26  # alice's 23 and bob's 3
    part = groups(text)[1]
    assert "Disagreements, farthest apart first (20 of 26; all in --json)" in visible_text(part)
    (table,) = Page(part).table("disagreements")
    body = [cells for kind, cells in table["rows"] if kind == "tbody"]
    assert [cells[1] for cells in body] == [d["trace_id"] for d in labelled["disagreements"][:20]]
    # Long texts are cut short, saying how long they were; the whole is in --json.
    (long_note,) = [cells[7] for cells in body if LONG_NOTE[:40] in cells[7]]
    assert len(long_note) < 500 and f"({len(LONG_NOTE.strip())} characters)" in long_note


def test_nothing_is_fetched_and_there_is_no_script(agreement):
    _, text, _ = agreement
    page = Page(text)
    assert page.fetched == []
    assert "link" not in page.tags and "script" not in page.tags and "iframe" not in page.tags
    assert "url(" not in text and "@import" not in text
    # The only http(s):// is the SVG namespace, which is a name, not an address.
    assert set(re.findall(r'[\w:-]*="?https?://[^"\s>]*', text)) == {'xmlns="http://www.w3.org/2000/svg'}


def test_a_group_of_one_class_shows_what_is_undefined(tmp_path):
    scored = write_scored(tmp_path / "s.jsonl", [scored_root(trace_id(i), METRIC, 0.9) for i in (1, 2, 3)])
    labels = write_labels(
        tmp_path / "l.jsonl", [{"trace_id": trace_id(i), "metric": METRIC, "label": "pass"} for i in (1, 2, 3)]
    )
    text, document = run_agree(tmp_path, scored, labels)
    [result] = document["results"]
    assert result["kappa"]["estimate"] is None and result["disagreements"] == []
    page = Page(text)
    assert page.card("κ, the judge vs people").startswith("κ, the judge vs people n/a Undefined")
    assert "1.00" in page.card("Accuracy")
    assert confusion_of(page.table("confusion")[0]) == {"pass": {"pass": 3}}
    words = visible_text(text)
    assert "None: people and the judge put every label in the same class." in words
    assert "None to fit: no pass/fail labels, or the judge gave a single score." in words
    assert "The judge was asked once per item" in words


# In a real browser.

LAYOUT = """
(function () {
  function box(element) {
    var r = element.getBoundingClientRect(), style = getComputedStyle(element);
    return {left: r.left, right: r.right, top: r.top + scrollY, width: r.width, height: r.height,
            shown: style.visibility !== 'hidden' && style.display !== 'none' && Number(style.opacity) > 0};
  }
  function all(selector) { return Array.prototype.map.call(document.querySelectorAll(selector), box); }
  function overflowing(selector) {
    return Array.prototype.filter.call(document.querySelectorAll(selector), function (e) {
      return e.scrollWidth > e.clientWidth + 1;
    }).map(function (e) { return e.className + ': ' + e.textContent.slice(0, 60); });
  }
  return {
    innerWidth: innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth,
    headline: all('section.group .cards'),
    cards: all('section.group .card'),
    confusion: all('table.confusion'),
    scrolls: all('div.scroll'),
    disagreements: all('table.disagreements'),
    overflowingCards: overflowing('.card, figure.panel, h1, h2, .meta, footer p'),
    smallestText: Math.min.apply(null, Array.prototype.map.call(
      document.querySelectorAll('main p, main td, main th, main h3'),
      function (e) { return parseFloat(getComputedStyle(e).fontSize); })),
  };
})()
"""


@pytest.fixture(scope="module")
def layouts(agreement, tmp_path_factory) -> dict[int, dict]:
    """The page's layout at each width in one headless Chromium, with a screenshot of each."""
    browser = chromium()
    path, _, _ = agreement
    devtools = DevTools(browser, tmp_path_factory.mktemp("chromium") / "profile")
    made = {}
    try:
        for width, screenshot in SCREENSHOTS.items():
            devtools.load(path.as_uri(), width)
            made[width] = devtools.evaluate(LAYOUT)
            devtools.screenshot(screenshot, width)
    finally:
        devtools.close()
    return made


WIDTHS = pytest.mark.parametrize("width", sorted(SCREENSHOTS))


@WIDTHS
def test_in_chromium_nothing_overflows_the_page(layouts, width):
    layout = layouts[width]
    assert layout["innerWidth"] == width
    assert layout["scrollWidth"] <= layout["innerWidth"] and layout["bodyScrollWidth"] <= layout["innerWidth"]
    for scroll in layout["scrolls"]:  # a wide table scrolls inside its box, which fits the page
        assert 0 <= scroll["left"] and scroll["right"] <= width
    assert layout["overflowingCards"] == []  # no card, panel or heading spills its text
    assert layout["smallestText"] >= 11


@WIDTHS
def test_in_chromium_the_headline_and_the_confusion_tables_are_in_view(layouts, width):
    layout = layouts[width]
    assert len(layout["headline"]) == 2 and len(layout["confusion"]) == 3
    for element in layout["headline"] + layout["cards"] + layout["confusion"]:
        assert element["shown"] and element["width"] > 0 and element["height"] > 0
        assert 0 <= element["left"] and element["right"] <= width, element


def test_in_chromium_a_narrow_page_scrolls_the_disagreements_in_their_box(layouts):
    narrow, wide = layouts[400], layouts[1400]
    assert len(narrow["disagreements"]) == 2
    for table in narrow["disagreements"]:
        assert table["width"] > 400  # wider than the phone: its box scrolls, the page does not
    for table in wide["disagreements"]:
        assert table["right"] <= 1400


def test_in_chromium_a_screenshot_of_each_width(layouts):
    for width, path in SCREENSHOTS.items():
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(data[16:20], "big") == width  # the PNG header's width
