"""Small inline SVG charts for the HTML report: lines with interval bands, histograms,
horizontal bars.

Static SVG keeps the report one file that opens offline in any browser; each point and
bar carries a `<title>`, so hovering shows its exact values. Every text from the data is
escaped here.

Labels of marked points are placed, not drawn at a fixed offset: `place_labels` tries
positions around each point, nearest first, and keeps the first whose box stays inside
the chart and clear of the curves, the other labels and the points. Text widths are
estimated on the wide side (`text_width`), so a box drawn from the estimate holds the
rendered text in the common sans-serif fonts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777")
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 46, 12, 14, 38
LEGEND_ROW = 18
LABEL_SIZE = 11  # font size of a marker's label
HALO = 2.0  # the white stroke around a label's glyphs, and the room kept around its box
# Advance widths in em, rounded up from DejaVu Sans (among the widest common sans-serifs).
_NARROW, _WIDE, _SYMBOL = set(" .,:;'|!iljft()[]"), set("mwMW%@"), set("→−=^+<>×~")
ASCENT, DESCENT = 0.95, 0.3  # in em, from the baseline; a little over DejaVu Sans's
MARKER_GAP = 9.0  # from a marker's centre to its label: clear of its circle


@dataclass
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y)
    band: list[tuple[float, float, float]] = field(default_factory=list)  # (x, low, high)
    color: str | None = None
    dashed: bool = False
    markers: bool = True


@dataclass(frozen=True)
class Bar:
    """One bar of `bar_chart`: a count with its label, optionally a link."""

    label: str
    value: int
    color: str
    href: str | None = None  # a fragment of the page, such as "#why-0"
    title: str = ""  # shown on hover; the label and value when empty


@dataclass(frozen=True)
class Marker:
    """A highlighted point with a label, such as the suite's measured operating point."""

    x: float
    y: float
    label: str


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle in SVG units (y grows downwards)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def intersects(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def within(self, other: Box) -> bool:
        return other.x0 <= self.x0 and self.x1 <= other.x1 and other.y0 <= self.y0 and self.y1 <= other.y1

    def grown(self, by: float) -> Box:
        return Box(self.x0 - by, self.y0 - by, self.x1 + by, self.y1 + by)

    def distance(self, x: float, y: float) -> float:
        """From (x, y) to the nearest point of the box; 0 inside it."""
        dx = max(self.x0 - x, 0.0, x - self.x1)
        dy = max(self.y0 - y, 0.0, y - self.y1)
        return math.hypot(dx, dy)

    def nearest(self, x: float, y: float) -> tuple[float, float]:
        return min(max(x, self.x0), self.x1), min(max(y, self.y0), self.y1)

    def crosses(self, a: tuple[float, float], b: tuple[float, float]) -> bool:
        """Whether the segment a-b passes through the box (Liang-Barsky clipping)."""
        (ax, ay), (bx, by) = a, b
        low, high = 0.0, 1.0
        for p, q in (
            (ax - bx, ax - self.x0),
            (bx - ax, self.x1 - ax),
            (ay - by, ay - self.y0),
            (by - ay, self.y1 - ay),
        ):
            if p == 0:
                if q < 0:
                    return False
                continue
            t = q / p
            if p < 0:
                low = max(low, t)
            else:
                high = min(high, t)
            if low > high:
                return False
        return True


def text_width(text: str, size: float) -> float:
    """A width `text` at font size `size` is unlikely to exceed in a sans-serif font."""
    em = 0.0
    for char in text:
        if char in _NARROW:
            em += 0.4
        elif char in _WIDE:
            em += 1.0
        elif char in _SYMBOL:
            em += 0.84
        elif char.isupper():
            em += 0.78
        else:
            em += 0.64
    return em * size


def label_size(text: str, size: float = LABEL_SIZE) -> tuple[float, float]:
    """The box of a label: its text with the halo around it."""
    return text_width(text, size) + 2 * HALO, (ASCENT + DESCENT) * size + 2 * HALO


def place_labels(
    points: Sequence[tuple[float, float]],
    sizes: Sequence[tuple[float, float]],
    area: Box,
    *,
    segments: Sequence[tuple[tuple[float, float], tuple[float, float]]] = (),
    avoid: Sequence[Box] = (),
    gap: float = 6.0,
    step: float = 4.0,
    reach: float = 160.0,
) -> list[Box]:
    """A box of `sizes[i]` for the label of `points[i]`, in order, each placed nearest its point.

    Candidates lie on rings at `gap`, `gap + step`, ... up to `reach` from the point, slid
    along each side in `step`s; they are tried by their distance to the point, then by the
    distance of their centre (so a label sits centred above or below rather than off to a
    corner), then above before below before right before left. The first candidate inside
    `area` that crosses no segment, overlaps no box of `avoid` nor an earlier label, lies
    nearer its own point than any other, and whose leader line from its point passes no
    other point and crosses no earlier label, is kept. Where none is clear, the nearest one
    inside `area` that overlaps no earlier label is kept.
    """
    placed: list[Box] = []
    segment_boxes = [
        (Box(min(a[0], b[0]), min(a[1], b[1]), max(a[0], b[0]), max(a[1], b[1])), a, b) for a, b in segments
    ]
    for index, ((px, py), (w, h)) in enumerate(zip(points, sizes)):
        others = [q for i, q in enumerate(points) if i != index and q != (px, py)]
        around_others = [Box(qx - gap, qy - gap, qx + gap, qy + gap) for qx, qy in others]
        fallback = None
        for *_, x0, y0 in sorted(_candidates(px, py, w, h, area, gap, step, reach)):
            box = Box(x0, y0, x0 + w, y0 + h)
            if any(box.intersects(other) for other in placed):
                continue
            if fallback is None:
                fallback = box
            if any(box.intersects(other) for other in avoid):
                continue
            if any(bounds.intersects(box) and box.crosses(a, b) for bounds, a, b in segment_boxes):
                continue
            own = box.distance(px, py)
            if any(box.distance(qx, qy) <= own for qx, qy in others):
                continue
            leader = ((px, py), box.nearest(px, py))
            if any(other.crosses(*leader) for other in [*placed, *around_others]):
                continue
            placed.append(box)
            break
        else:
            # Nowhere clear: the nearest box inside the chart, or centred above the point.
            placed.append(fallback or Box(px - w / 2, py - gap - h, px + w / 2, py - gap))
    return placed


def _candidates(px: float, py: float, w: float, h: float, area: Box, gap: float, step: float, reach: float):
    # (distance to the point, distance of the centre, side, slide, box) for each box inside `area`.
    ring = 0
    while gap + ring * step <= reach:
        d = gap + ring * step
        slides = int((w + 2 * d) / step / 2) + 1
        for t in range(-slides, slides + 1):
            offset = t * step
            corners = (
                (0, px - w / 2 + offset, py - d - h),  # above
                (1, px - w / 2 + offset, py + d),  # below
                (2, px + d, py - h / 2 + offset),  # right
                (3, px - d - w, py - h / 2 + offset),  # left
            )
            for side, x0, y0 in corners:
                if x0 < area.x0 or y0 < area.y0 or x0 + w > area.x1 or y0 + h > area.y1:
                    continue
                dx, dy = max(x0 - px, 0.0, px - x0 - w), max(y0 - py, 0.0, py - y0 - h)
                centre = math.hypot(x0 + w / 2 - px, y0 + h / 2 - py)
                # Ties: a label above or below slides right first, one beside slides up first.
                along = -offset if side < 2 else offset
                yield round(math.hypot(dx, dy), 6), round(centre, 6), side, along, x0, y0
        ring += 1


def line_chart(
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    x_max: float,
    *,
    x_min: float = 0.0,
    width: int = 520,
    height: int = 260,
    markers: Sequence[Marker] = (),
    integer_x: bool = False,
    title: str = "",
) -> str:
    """Lines over y in [0, 1] with shaded bands, labelled markers and a legend under the plot.

    A series of one point shows its band as a bar, there being no area to shade.
    """
    legend = _legend_layout(series, width)
    rows = 1 + max((row for _, row in legend), default=0)
    height += (rows - 1) * LEGEND_ROW  # the plot keeps its height when the legend wraps
    # Labelled markers get a label's height above y = 1, where curves often start and crowd.
    above = label_size("")[1] + MARKER_GAP + 1 if markers else 0.0
    plot = _Plot(x_min, x_max, width, height, legend_rows=rows, integer_x=integer_x, room_above=above)
    # Series of a single point (one k) side by side, so one does not hide another.
    singles = [i for i, s in enumerate(series) if len(s.points) == 1]
    parts = [plot.open(title), plot.axes(x_label, y_label, integer_x)]
    segments: list[tuple[tuple[float, float], tuple[float, float]]] = []
    dots: list[Box] = []
    for i, s in enumerate(series):
        color = _color(s, i)
        if len(s.band) > 1:
            upper = [plot.xy(x, high) for x, _, high in s.band]
            lower = [plot.xy(x, low) for x, low, _ in reversed(s.band)]
            parts.append(
                f'<polygon points="{_points(upper + lower)}" fill="{color}" fill-opacity="0.15" stroke="none"/>'
            )
        shift = 8 * (singles.index(i) - (len(singles) - 1) / 2) if i in singles else 0.0
        if len(s.band) == 1:
            x, low, high = s.band[0]
            (px, top), (_, bottom) = plot.xy(x, high), plot.xy(x, low)
            px += shift
            parts.append(
                f'<line class="whisker" x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{bottom:.1f}" stroke="{color}" '
                f'stroke-opacity="0.45" stroke-width="6" stroke-linecap="round"/>'
            )
        if len(s.points) > 1:
            dash = ' stroke-dasharray="5 4"' if s.dashed else ""
            pixels = [plot.xy(x, y) for x, y in s.points]
            segments += list(zip(pixels, pixels[1:]))
            parts.append(f'<polyline points="{_points(pixels)}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        if s.markers or len(s.points) == 1:
            bands = {x: (low, high) for x, low, high in s.band}
            for x, y in s.points:
                px, py = plot.xy(x, y)
                px += shift
                dots.append(Box(px - 3.5, py - 3.5, px + 3.5, py + 3.5))
                detail = f"{escape(s.name)}: x={_num(x)}, y={y:.3f}"
                if x in bands:
                    detail += f" [{bands[x][0]:.3f}, {bands[x][1]:.3f}]"
                parts.append(
                    f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"><title>{detail}</title></circle>'
                )
    parts += _markers(plot, markers, segments, dots)
    parts.append(_legend(series, legend, plot.legend_top))
    parts.append("</svg>")
    return "".join(parts)


def _markers(plot: _Plot, markers: Sequence[Marker], segments, dots: list[Box]) -> list[str]:
    """Circles on the marked points, each with its label placed clear of the curves."""
    centres = [plot.xy(m.x, m.y) for m in markers]
    rings = [Box(px - 8, py - 8, px + 8, py + 8) for px, py in centres]
    # Labels may use the margin above the plot, never the axes' ticks or the legend.
    area = Box(plot.left + 2, 1, plot.width - 1, plot.bottom - 2)
    sizes = [label_size(m.label) for m in markers]
    boxes = place_labels(centres, sizes, area, segments=segments, avoid=[*rings, *dots], gap=MARKER_GAP)
    parts = []
    for marker, (px, py), box in zip(markers, centres, boxes):
        parts.append(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="6" fill="none" stroke="#111" stroke-width="2">'
            f"<title>{escape(marker.label)}</title></circle>"
        )
        if box.distance(px, py) > MARKER_GAP + 4:
            # Placed away from its point: a leader line says which point the label names.
            nx, ny = box.nearest(px, py)
            length = math.hypot(nx - px, ny - py)
            sx, sy = px + (nx - px) * 7 / length, py + (ny - py) * 7 / length
            parts.append(
                f'<line class="leader" x1="{sx:.1f}" y1="{sy:.1f}" x2="{nx:.1f}" y2="{ny:.1f}" stroke="#6b7280" '
                f'stroke-width="1"/>'
            )
        baseline = box.y1 - HALO - DESCENT * LABEL_SIZE
        parts.append(
            f'<text class="marker-label" x="{box.x0 + HALO:.1f}" y="{baseline:.1f}" font-size="{LABEL_SIZE}" '
            f'fill="#111" stroke="#fff" stroke-width="3" paint-order="stroke">{escape(marker.label)}</text>'
        )
    return parts


def histogram(
    values: Sequence[float],
    bins: int = 10,
    *,
    width: int = 260,
    height: int = 150,
    color: str = PALETTE[0],
    title: str = "",
) -> str:
    """Counts of `values` in `bins` equal bins over [0, 1] (1.0 falls in the last)."""
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, max(0, int(value * bins)))] += 1
    top = max(counts) or 1
    left, bottom, right, upper = 30, height - 22, width - 8, 8
    bar = (right - left) / bins
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(title)}">',
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>',
        f'<text x="{left - 4}" y="{upper + 8}" font-size="10" text-anchor="end" fill="#555">{top}</text>',
        f'<text x="{left - 4}" y="{bottom}" font-size="10" text-anchor="end" fill="#555">0</text>',
    ]
    for i, count in enumerate(counts):
        h = (bottom - upper) * count / top
        low, high = i / bins, (i + 1) / bins
        span = f"[{low:.1f}, {high:.1f}{']' if i == bins - 1 else ')'}"
        parts.append(
            f'<rect x="{left + i * bar + 1:.1f}" y="{bottom - h:.1f}" width="{bar - 2:.1f}" '
            f'height="{max(h, 0):.1f}" fill="{color}"><title>{span}: {count}</title></rect>'
        )
    for tick in (0, 0.5, 1):
        x = left + tick * (right - left)
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 14}" font-size="10" text-anchor="middle" fill="#555">{tick:g}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


BAR_ROW, BAR_HEIGHT, BAR_LABEL = 34, 12, 12  # a row: its label's line, then the bar


def bar_chart(
    bars: Sequence[Bar],
    *,
    width: int = 360,
    legend: Sequence[tuple[str, str]] = (),
    title: str = "",
) -> str:
    """Horizontal bars, longest for the largest value, each labelled on the line above it
    (so a long label needs no room beside the bar) with its value at its end; a legend of
    (name, color) under them. A bar with `href` links there."""
    top = max((bar.value for bar in bars), default=0) or 1
    value_room = max((text_width(str(bar.value), 11) for bar in bars), default=0.0) + 8
    left, right = 4.0, width - 4 - value_room
    legend_layout = _swatch_layout([name for name, _ in legend], width)
    legend_rows = 1 + max((row for _, row in legend_layout), default=0) if legend else 0
    height = 6 + len(bars) * BAR_ROW + legend_rows * LEGEND_ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(title)}">'
    ]
    for i, bar in enumerate(bars):
        y = 4 + i * BAR_ROW
        length = max((right - left) * bar.value / top, 2.0)
        tip = escape(bar.title or f"{bar.label}: {bar.value}")
        row = (
            f"<title>{tip}</title>"
            f'<text x="{left:.1f}" y="{y + BAR_LABEL - 1}" font-size="{BAR_LABEL}" fill="#111">'
            f"{escape(bar.label)}</text>"
            f'<rect x="{left:.1f}" y="{y + BAR_LABEL + 3}" width="{length:.1f}" height="{BAR_HEIGHT}" rx="2" '
            f'fill="{bar.color}"/>'
            f'<text x="{left + length + 4:.1f}" y="{y + BAR_LABEL + 3 + BAR_HEIGHT - 2}" font-size="11" '
            f'fill="#333">{bar.value}</text>'
        )
        if bar.href:
            row = f'<a href="{escape(bar.href)}">{row}</a>'
        parts.append(f"<g>{row}</g>")
    legend_top = 6 + len(bars) * BAR_ROW
    for (name, color), (x, row) in zip(legend, legend_layout):
        y = legend_top + row * LEGEND_ROW + 10
        parts.append(
            f'<rect x="{x:.1f}" y="{y - 9}" width="10" height="10" rx="2" fill="{color}"/>'
            f'<text x="{x + 14:.1f}" y="{y}" font-size="11" fill="#333">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _swatch_layout(names: Sequence[str], width: int) -> list[tuple[float, int]]:
    """(x, row) per legend entry of a bar chart: left to right, wrapping."""
    layout, x, row = [], 4.0, 0
    for name in names:
        entry = 14 + text_width(name, 11)
        if x + entry > width - 2 and x > 4:
            x, row = 4.0, row + 1
        layout.append((x, row))
        x += entry + 12
    return layout


def interval_bar(estimate: float, low: float, high: float, *, width: int = 180, height: int = 18) -> str:
    """An estimate on [0, 1] with its interval, as a thin bar."""

    def x(v: float) -> float:
        return 2 + v * (width - 4)

    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{estimate:.3f} in [{low:.3f}, {high:.3f}]">'
        f'<rect x="2" y="{height / 2 - 1}" width="{width - 4}" height="2" fill="#e5e7eb"/>'
        f'<rect x="{x(low):.1f}" y="{height / 2 - 4}" width="{max(x(high) - x(low), 1):.1f}" height="8" '
        f'rx="3" fill="#93c5fd"/>'
        f'<rect x="{x(estimate) - 1.5:.1f}" y="2" width="3" height="{height - 4}" fill="#1e3a8a"/>'
        f"<title>{estimate:.3f} [{low:.3f}, {high:.3f}]</title></svg>"
    )


class _Plot:
    def __init__(
        self,
        x_min: float,
        x_max: float,
        width: int,
        height: int,
        *,
        legend_rows: int,
        integer_x: bool,
        room_above: float = 0.0,
    ):
        if x_max <= x_min:
            # One x: centred, with no tick beyond it (an integer axis of one k shows only that k).
            x_min, x_max = (x_min - 0.5, x_max + 0.5) if integer_x else (x_min, x_min + 1)
        self.x_min, self.x_max = x_min, x_max
        self.width, self.height = width, height
        self.left, self.right = MARGIN_LEFT, width - MARGIN_RIGHT
        self.legend_top = height - legend_rows * LEGEND_ROW
        self.top, self.bottom = max(MARGIN_TOP, room_above), self.legend_top - MARGIN_BOTTOM

    def xy(self, x: float, y: float) -> tuple[float, float]:
        fx = (x - self.x_min) / (self.x_max - self.x_min)
        return self.left + fx * (self.right - self.left), self.bottom - min(max(y, 0.0), 1.0) * (self.bottom - self.top)

    def open(self, title: str) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" aria-label="{escape(title)}">'
        )

    def axes(self, x_label: str, y_label: str, integer_x: bool) -> str:
        parts = []
        for tick in (0, 0.25, 0.5, 0.75, 1):
            _, y = self.xy(self.x_min, tick)
            parts.append(
                f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.right}" y2="{y:.1f}" stroke="#eee"/>'
                f'<text x="{self.left - 6}" y="{y + 3.5:.1f}" font-size="10" text-anchor="end" '
                f'fill="#555">{tick:g}</text>'
            )
        for tick in _x_ticks(self.x_min, self.x_max, integer_x):
            x, _ = self.xy(tick, 0)
            parts.append(
                f'<line x1="{x:.1f}" y1="{self.bottom}" x2="{x:.1f}" y2="{self.bottom + 4}" stroke="#888"/>'
                f'<text x="{x:.1f}" y="{self.bottom + 15}" font-size="10" text-anchor="middle" '
                f'fill="#555">{_num(tick)}</text>'
            )
        parts.append(
            f'<line x1="{self.left}" y1="{self.bottom}" x2="{self.right}" y2="{self.bottom}" stroke="#888"/>'
            f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{self.bottom}" stroke="#888"/>'
            f'<text x="{(self.left + self.right) / 2:.1f}" y="{self.bottom + 29}" font-size="11" '
            f'text-anchor="middle" fill="#333">{escape(x_label)}</text>'
            f'<text x="12" y="{(self.top + self.bottom) / 2:.1f}" font-size="11" text-anchor="middle" '
            f'fill="#333" transform="rotate(-90 12 {(self.top + self.bottom) / 2:.1f})">{escape(y_label)}</text>'
        )
        return "".join(parts)


def _color(s: Series, index: int) -> str:
    return s.color or PALETTE[index % len(PALETTE)]


def _legend_layout(series: Sequence[Series], width: int) -> list[tuple[float, int]]:
    """(x, row) per series: entries left to right, a new row where one would overflow."""
    layout, x, row = [], float(MARGIN_LEFT), 0
    for s in series:
        entry = 22 + text_width(s.name, 11)
        if x + entry > width - 2 and x > MARGIN_LEFT:
            x, row = float(MARGIN_LEFT), row + 1
        layout.append((x, row))
        x += entry + 12
    return layout


def _legend(series: Sequence[Series], layout: list[tuple[float, int]], top: float) -> str:
    parts = []
    for i, (s, (x, row)) in enumerate(zip(series, layout)):
        y = top + row * LEGEND_ROW + 10
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        parts.append(
            f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 18:.1f}" y2="{y - 4}" stroke="{_color(s, i)}" '
            f'stroke-width="2"{dash}/><text x="{x + 22:.1f}" y="{y}" font-size="11" fill="#333">{escape(s.name)}</text>'
        )
    return "".join(parts)


def _x_ticks(x_min: float, x_max: float, integer_x: bool) -> list[float]:
    span = x_max - x_min
    if integer_x and span <= 10:
        return [float(v) for v in range(math.ceil(x_min), math.floor(x_max) + 1)]
    step = (
        next((s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 1000) if span / s <= 8), span / 8)
        if span >= 1
        else span / 4
    )
    first = step * -(-x_min // step)
    ticks, v = [], first
    while v <= x_max + 1e-9:
        ticks.append(v)
        v += step
    return ticks


def _points(points: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def _num(value: float) -> str:
    return f"{value:g}"
