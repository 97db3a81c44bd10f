"""Small SVG charts over the steps of a scenario: lines (a gap where a value is undefined) and
stacked bars, with the current step marked. The explorer redraws them on every step, where a
plotting library in the browser cost 100 ms or more a step; an SVG is one image to draw.

Pure functions of numbers: ``values[i]`` is the value after step ``i`` (step 0 = before the
first), drawn only up to the step shown, so a chart never tells what comes next, though its
axis spans the whole scenario.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from explorer.viz.text import esc

LEFT, RIGHT, TOP, BOTTOM = 56, 10, 12, 28
MAX_DOTTED = 60  # steps up to which every value gets a dot
MARKER = "#555555"  # the line of the step shown


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    colour: str
    dash: str = ""  # an SVG stroke-dasharray, "" for a solid line


def _frame(
    n: int, width: int, height: int, y_max: float, y_ticks: Sequence[float], y_text: Callable[[float], str], k: int
) -> tuple[str, str, Callable[[float], float], Callable[[float], float]]:
    """The axes, gridlines, tick labels and the marker of step k; (svg, x, y) with x(step) and y(value)."""
    w, h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + (w * i / n if n else 0)

    def y(v: float) -> float:
        return TOP + h * (1 - (v / y_max if y_max else 0))

    grid = "".join(
        f'<line x1="{LEFT}" x2="{LEFT + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
        f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="13">{esc(y_text(v))}</text>'
        for v in y_ticks
    )
    ticks = sorted({0, n, k} | set(range(0, n + 1, max(1, n // 8 or 1))))
    grid += "".join(
        f'<text x="{x(i):.1f}" y="{TOP + h + 16}" text-anchor="middle" font-size="13">{i}</text>' for i in ticks
    )
    grid += f'<text x="{LEFT + w / 2:.1f}" y="{height - 2}" text-anchor="middle" font-size="13">step</text>'
    marker = (
        f'<line x1="{x(k):.1f}" x2="{x(k):.1f}" y1="{TOP}" y2="{TOP + h}" stroke="{MARKER}" stroke-width="1.5" '
        'stroke-dasharray="3 3"/>'
    )
    return grid, marker, x, y


def _svg(width: int, height: int, body: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'font-family="sans-serif">{body}</svg>'
    )


def line_chart_svg(
    series: Sequence[Series],
    n: int,
    k: int,
    y_max: float = 1.0,
    y_ticks: Sequence[float] = (0.0, 0.5, 1.0),
    y_text: Callable[[float], str] = lambda v: f"{int(round(v * 100))}%",
    width: int = 560,
    height: int = 170,
    legend: bool = False,
) -> str:
    """One polyline per run of defined values of each series, steps 0..k of n; with ``legend``
    the series' names along the top (short names: long ones go in ``legend_html`` below)."""
    grid, marker, x, y = _frame(n, width, height, y_max, y_ticks, y_text, k)
    lines = ""
    for s in series:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(s.values[: max(0, min(k, n)) + 1]):
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{x(i):.1f},{y(v):.1f}")
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        lines += "".join(
            f'<polyline fill="none" stroke="{s.colour}" stroke-width="2.5"{dash} points="{" ".join(r)}"/>'
            for r in runs
            if r
        )
        # a dot at each value on a short axis, and always where a value stands alone between gaps
        dots = [p for r in runs for p in r] if n <= MAX_DOTTED else [r[0] for r in runs if len(r) == 1]
        lines += "".join(
            f'<circle cx="{d.split(",")[0]}" cy="{d.split(",")[1]}" r="3" fill="{s.colour}"/>' for d in dots
        )
    if legend:
        at = LEFT + 8
        for s in series:
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            lines += (
                f'<line x1="{at}" x2="{at + 20}" y1="{TOP + 4}" y2="{TOP + 4}" stroke="{s.colour}" stroke-width="2.5"{dash}/>'
                f'<text x="{at + 24}" y="{TOP + 8}" font-size="13">{esc(s.name)}</text>'
            )
            at += 36 + 7 * len(s.name)
    return _svg(width, height, grid + marker + lines)


def stacked_bars_svg(
    series: Sequence[Series],
    n: int,
    k: int,
    width: int = 560,
    height: int = 190,
    y_text: Callable[[float], str] = lambda v: f"{v:,.0f}",
) -> str:
    """One bar per step 1..k, its parts stacked in the order of ``series`` (None counts as 0)."""
    top = max((sum(s.values[i] or 0 for s in series) for i in range(1, min(k, n) + 1)), default=0)
    y_max = top or 1.0
    grid, marker, x, y = _frame(n, width, height, y_max, (0.0, y_max / 2, y_max) if top else (0.0,), y_text, k)
    bar = max(1.0, (width - LEFT - RIGHT) / max(n, 1) * 0.7)
    rects = ""
    for i in range(1, min(k, n) + 1):
        base = 0.0
        for s in series:
            v = s.values[i] or 0
            if v:
                rects += (
                    f'<rect x="{x(i) - bar / 2:.1f}" y="{y(base + v):.1f}" width="{bar:.1f}" '
                    f'height="{y(base) - y(base + v):.1f}" fill="{s.colour}"/>'
                )
            base += v
    return _svg(width, height, grid + rects + marker)


def legend_html(series: Sequence[Series]) -> str:
    """The series' names beside their colours, as HTML that wraps under a chart."""
    items = "".join(
        f'<span><span class="px-swatch" style="background:{s.colour}"></span>{esc(s.name)}</span>' for s in series
    )
    return f'<div class="px-chart-legend">{items}</div>'
