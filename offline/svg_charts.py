"""Small inline SVG charts for the HTML report: lines with interval bands, histograms.

Static SVG keeps the report one file that opens offline in any browser; each point and
bar carries a `<title>`, so hovering shows its exact values. Every text from the data is
escaped here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777")
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 46, 12, 14, 38


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]  # (x, y)
    band: list[tuple[float, float, float]] = field(default_factory=list)  # (x, low, high)
    color: str | None = None
    dashed: bool = False
    markers: bool = True


@dataclass(frozen=True)
class Marker:
    """A highlighted point with a label, such as the suite's measured operating point."""

    x: float
    y: float
    label: str


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
    """Lines over y in [0, 1] with shaded bands and a legend under the plot."""
    plot = _Plot(x_min, x_max, width, height)
    parts = [plot.open(title), plot.axes(x_label, y_label, integer_x)]
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        if len(s.band) > 1:
            upper = [plot.xy(x, high) for x, _, high in s.band]
            lower = [plot.xy(x, low) for x, low, _ in reversed(s.band)]
            parts.append(
                f'<polygon points="{_points(upper + lower)}" fill="{color}" fill-opacity="0.15" stroke="none"/>'
            )
        if len(s.points) > 1:
            dash = ' stroke-dasharray="5 4"' if s.dashed else ""
            parts.append(
                f'<polyline points="{_points([plot.xy(x, y) for x, y in s.points])}" fill="none" '
                f'stroke="{color}" stroke-width="2"{dash}/>'
            )
        if s.markers or len(s.points) == 1:
            bands = {x: (low, high) for x, low, high in s.band}
            for x, y in s.points:
                px, py = plot.xy(x, y)
                detail = f"{escape(s.name)}: x={_num(x)}, y={y:.3f}"
                if x in bands:
                    detail += f" [{bands[x][0]:.3f}, {bands[x][1]:.3f}]"
                parts.append(
                    f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"><title>{detail}</title></circle>'
                )
    for marker in markers:
        px, py = plot.xy(marker.x, marker.y)
        parts.append(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="6" fill="none" stroke="#111" stroke-width="2">'
            f"<title>{escape(marker.label)}</title></circle>"
        )
        anchor = "end" if px > width * 0.6 else "start"
        dx = -9 if anchor == "end" else 9
        parts.append(
            f'<text x="{px + dx:.1f}" y="{py - 8:.1f}" font-size="11" text-anchor="{anchor}" '
            f'fill="#111" stroke="#fff" stroke-width="3" paint-order="stroke">{escape(marker.label)}</text>'
        )
    parts.append(_legend(series, width, height))
    parts.append("</svg>")
    return "".join(parts)


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
    def __init__(self, x_min: float, x_max: float, width: int, height: int):
        self.x_min, self.x_max = x_min, x_max if x_max > x_min else x_min + 1
        self.width, self.height = width, height
        self.left, self.right = MARGIN_LEFT, width - MARGIN_RIGHT
        self.top, self.bottom = MARGIN_TOP, height - MARGIN_BOTTOM - 18  # room for the legend

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


def _legend(series: Sequence[Series], width: int, height: int) -> str:
    parts, x, y = [], MARGIN_LEFT, height - 10
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        parts.append(
            f'<line x1="{x}" y1="{y - 4}" x2="{x + 18}" y2="{y - 4}" stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{x + 22}" y="{y}" font-size="11" fill="#333">{escape(s.name)}</text>'
        )
        x += 30 + 6.5 * len(s.name)
        if x > width - 60:
            break
    return "".join(parts)


def _x_ticks(x_min: float, x_max: float, integer_x: bool) -> list[float]:
    span = x_max - x_min
    if integer_x and span <= 10:
        return [float(v) for v in range(int(x_min), int(x_max) + 1)]
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
