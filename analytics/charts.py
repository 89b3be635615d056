"""The report's charts, drawn by matplotlib into PNG files.

Each function here draws one chart from plain values (lists, dicts), so
that a chart can be drawn in another process (painter.py). The bytes depend
only on those values and on matplotlib's release.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

# A chart's pixels are its figure's inches at this resolution.
DPI = 80


def _figure(width: float) -> tuple[Figure, Axes]:
    """A figure on the Agg canvas (files only, no display, no pyplot state)."""
    figure = Figure(figsize=(width, 4))
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _save(figure: Figure, path: Path, *, fitted: bool = True) -> None:
    """Write `figure` as a PNG; `fitted`: its margins fitted to its labels
    (else the fixed ones of a time chart, whose labels are of known width:
    fitting them took half of such a chart's time)."""
    if fitted:
        figure.tight_layout()
    else:
        figure.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.24)
    # No "Software" key: the bytes do not depend on the matplotlib release.
    figure.savefig(path, format="png", dpi=DPI, metadata={"Software": None})


def _legend(axes: Axes) -> None:
    """A legend, if the chart has anything labelled (a log of no shard has not)."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7)


def bar(path: Path, title: str, labels: Sequence[str], values: Sequence[float], unit: str) -> None:
    figure, axes = _figure(8)
    axes.bar(list(labels), list(values), color="#4878a8")
    axes.set_title(title)
    axes.set_ylabel(unit)
    axes.tick_params(axis="x", labelrotation=30)
    _save(figure, path)


# At most this many labels on a time axis (every n-th slot is labelled).
MOST_LABELS = 40


def _time_axis(axes: Axes, labels: Sequence[str]) -> None:
    step = max(1, math.ceil(len(labels) / MOST_LABELS))
    ticks = range(0, len(labels), step)
    axes.set_xticks(list(ticks), [labels[i] for i in ticks], rotation=60, fontsize=7)
    axes.set_xlim(-0.6, len(labels) - 0.4)


def stacked(
    path: Path, title: str, labels: Sequence[str], series: Sequence[tuple[str, list[float]]]
) -> None:
    """Bars per slot (`labels`), each stacking the series' heights in order."""
    figure, axes = _figure(10)
    bottom = [0.0] * len(labels)
    for label, heights in series:
        axes.bar(range(len(labels)), heights, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    _time_axis(axes, labels)
    # Counts: whole numbers from zero, and an axis of 0 to 1 when all are zero.
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylim(0, max(1.0, max(bottom, default=0.0) * 1.05))
    axes.set_title(title)
    _legend(axes)
    _save(figure, path, fitted=False)


def latency(path: Path, title: str, labels: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """p50/p95/p99 per slot, in ms; a slot without deliveries has no point."""
    figure, axes = _figure(10)
    for name in ("p50", "p95", "p99"):
        values = [math.nan] * len(labels)
        for r in rows:
            values[r["slot"]] = r[name] * 1000
        axes.plot(range(len(labels)), values, marker=".", label=name)
    _time_axis(axes, labels)
    if any(r["p99"] > 0 for r in rows):
        _milliseconds_axis(axes)
    axes.set_ylabel("ms")
    axes.set_title(title)
    _legend(axes)
    _save(figure, path, fitted=False)


def _milliseconds_axis(axes: Axes) -> None:
    """A log y axis labelled 1, 2, 5, 10, ... as plain numbers: matplotlib's
    default labels (10^n, typeset as math text) took two thirds of a chart's
    time."""
    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.yaxis.set_minor_formatter(NullFormatter())


def latency_by_type(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """p50/p95/p99 bars side by side per event type (`key`), in ms."""
    figure, axes = _figure(10)
    width = 0.27
    for offset, name in enumerate(("p50", "p95", "p99")):
        axes.bar(
            [i + (offset - 1) * width for i in range(len(rows))],
            [r[name] * 1000 for r in rows],
            width=width,
            label=name,
        )
    axes.set_xticks(range(len(rows)), [r["key"] for r in rows], rotation=30, fontsize=8)
    if any(r["p99"] > 0 for r in rows):
        _milliseconds_axis(axes)
    axes.set_ylabel("ms")
    axes.set_title("Delivery latency by event type")
    _legend(axes)
    _save(figure, path)


def warm_up() -> None:
    """Draw a chart into memory: the fonts and their caches are loaded once,
    before the first chart that counts."""
    figure, axes = _figure(2)
    axes.bar(["a"], [1.0])
    axes.set_title("warm")
    figure.canvas.draw()
