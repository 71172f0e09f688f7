"""The report's charts: plain arrays in, PNG bytes out.

Built on matplotlib's object API (``Figure`` + the Agg canvas) rather than ``pyplot``, so rendering never touches a
GUI backend or global figure state and is safe inside a CLI, a test run or the demo.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DPI = 100
QUOTA_COLORS = {"produce": "#1f77b4", "fetch": "#2ca02c", "request": "#9467bd"}
THROTTLE_COLOR = "#d62728"


@dataclass(frozen=True, slots=True)
class EntitySeries:
    """One quota-id's per-window rate on one broker, with its limit (NaN = unlimited) and throttled windows."""

    title: str
    quota_type: str
    seconds: FloatArray  # window start, seconds since the run's first window
    rate: FloatArray
    limit: FloatArray
    throttled: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class ConnectionTimeline:
    """Connection outcomes per 1 s bucket (seconds since the run's first connection)."""

    seconds: FloatArray
    accepted: IntArray
    ip_throttled: IntArray
    mean_delay_ms: FloatArray
    max_delay_ms: FloatArray
    max_ip_throttle_ms: FloatArray


def rate_unit(quota_type: str) -> str:
    return "% thread time" if quota_type == "request" else "bytes/s"


def human(value: float) -> str:
    """Compact number for axes and tables: 1.5k, 2.3M, 4.1G."""
    magnitude = abs(value)
    for threshold, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def to_png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)  # constrained layout already fits; "tight" would draw twice
    return buf.getvalue()


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


OFF_SCALE = 5.0  # a quota more than this many times the peak rate is named in the title, not drawn


def rate_vs_quota(series: Sequence[EntitySeries], t0_label: str) -> bytes:
    """Small multiples: each top entity's rate per window against its quota, throttled windows marked."""
    n = max(len(series), 1)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(6.0 * cols, 2.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    formatter = FuncFormatter(lambda v, _pos: human(v))
    for i, ax in enumerate(axes.flat):
        if i >= len(series):
            if not series and i == 0:
                _empty(ax, "no windows in this backtest")
            else:
                ax.set_visible(False)
            continue
        s = series[i]
        color = QUOTA_COLORS.get(s.quota_type, "#333333")
        ax.plot(s.seconds, s.rate, color=color, linewidth=1.2, marker="o", markersize=2.5, label="rate")
        peak = float(np.nanmax(s.rate)) if s.rate.size else 0.0
        finite = s.limit[np.isfinite(s.limit)]
        title = s.title
        if finite.size and (peak == 0.0 or float(finite.max()) <= OFF_SCALE * peak):
            ax.step(s.seconds, s.limit, where="post", color="#444444", linestyle="--", linewidth=1.0, label="quota")
        elif finite.size:  # a quota far above the traffic would flatten the rate line: name it instead
            title += f"  (quota {human(float(finite.max()))}, off scale)"
        if s.throttled.any():
            ax.scatter(
                s.seconds[s.throttled],
                s.rate[s.throttled],
                color=THROTTLE_COLOR,
                s=10,
                zorder=3,
                label="throttled window",
            )
        ax.set_title(title, fontsize=8, loc="left")
        ax.set_ylabel(rate_unit(s.quota_type), fontsize=8)
        ax.yaxis.set_major_formatter(formatter)
        ax.tick_params(labelsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7, loc="upper right")
    fig.supxlabel(f"seconds since {t0_label}", fontsize=9)
    fig.suptitle("Top entities: rate per 1 s window vs quota (per broker)", fontsize=11)
    return to_png(fig)


def throttle_distribution(throttle_ms: dict[str, IntArray]) -> bytes:
    """Histogram (log-spaced bins) of the non-zero throttle times each quota type handed out."""
    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    ax = fig.subplots()
    positive = {k: v[v > 0] for k, v in throttle_ms.items()}
    top = max((int(v.max()) for v in positive.values() if v.size), default=0)
    if top == 0:
        _empty(ax, "no request was throttled")
    else:
        bins = [float(b) for b in np.unique(np.geomspace(1, top + 1, num=40).astype(np.int64))]
        for quota_type, values in positive.items():
            if values.size:
                ax.hist(
                    values,
                    bins=bins,
                    histtype="step",
                    linewidth=1.5,
                    color=QUOTA_COLORS.get(quota_type),
                    label=f"{quota_type} ({values.size:,} throttled)",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("throttle time (ms)")
        ax.set_ylabel("requests")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    ax.set_title("Throttle-time distribution (throttled requests only)", fontsize=11, loc="left")
    return to_png(fig)


def connection_timeline(tl: ConnectionTimeline, t0_label: str) -> bytes:
    """Accepted vs IP-throttled connections per second, and the accept delay / throttle they saw."""
    fig = Figure(figsize=(9.0, 5.0), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    if tl.seconds.size == 0:
        _empty(top, "no connection events")
        _empty(bottom, "")
        return to_png(fig)
    top.bar(tl.seconds, tl.accepted, width=1.0, align="edge", color="#1f77b4", label="accepted")
    top.bar(
        tl.seconds,
        tl.ip_throttled,
        width=1.0,
        align="edge",
        bottom=tl.accepted,
        color=THROTTLE_COLOR,
        label="IP throttled",
    )
    top.set_ylabel("connections / s")
    top.legend(fontsize=8, loc="upper right")
    top.grid(alpha=0.3)
    top.set_title("Connection accept timeline (all brokers)", fontsize=11, loc="left")
    mid = tl.seconds + 0.5  # the middle of each 1 s bar above
    bottom.plot(mid, tl.max_delay_ms, color="#ff7f0e", linewidth=1.2, label="max accept delay")
    bottom.plot(mid, tl.mean_delay_ms, color="#8c564b", linewidth=1.0, label="mean accept delay")
    if (tl.max_ip_throttle_ms > 0).any():
        bottom.plot(
            mid, tl.max_ip_throttle_ms, color=THROTTLE_COLOR, linewidth=1.0, linestyle=":", label="max IP throttle"
        )
    bottom.set_ylabel("ms")
    bottom.set_ylim(bottom=0)  # delays are never negative; an all-zero run would otherwise centre on 0
    bottom.set_xlabel(f"seconds since {t0_label}")
    bottom.legend(fontsize=8, loc="upper right")
    bottom.grid(alpha=0.3)
    return to_png(fig)


@dataclass(frozen=True, slots=True)
class UsageDistribution:
    """One entity's usage cells for one key as percentiles 0..100, with its current and proposed quota (NaN:
    none / unlimited)."""

    title: str
    quota_type: str
    quantiles: FloatArray
    current: float
    proposed: float


def usage_distributions(items: Sequence[UsageDistribution]) -> bytes:
    """Small multiples: each entity's per-(broker, second) usage by percentile, the current quota and the proposed
    one as horizontal lines (a current quota far above the usage is named in the title, not drawn)."""
    n = max(len(items), 1)
    cols = 3 if n > 4 else (2 if n > 1 else 1)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(4.6 * cols, 2.7 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    formatter = FuncFormatter(lambda v, _pos: human(v))
    pct = np.linspace(0.0, 100.0, 101)
    for i, ax in enumerate(axes.flat):
        if i >= len(items):
            if not items and i == 0:
                _empty(ax, "no proposal")
            else:
                ax.set_visible(False)
            continue
        u = items[i]
        color = QUOTA_COLORS.get(u.quota_type, "#333333")
        q = u.quantiles if u.quantiles.size == pct.size else np.full(pct.size, np.nan)
        ax.plot(pct, q, color=color, linewidth=1.4, label="usage")
        top = float(np.nanmax(q)) if np.isfinite(q).any() else 0.0
        title = u.title
        if np.isfinite(u.current) and (top == 0.0 or u.current <= OFF_SCALE * max(top, u.proposed)):
            ax.axhline(u.current, color="#444444", linestyle="--", linewidth=1.0, label=f"current {human(u.current)}")
        elif np.isfinite(u.current):
            title += f"  (current {human(u.current)}, off scale)"
        else:
            title += "  (current: unlimited)"
        if np.isfinite(u.proposed):
            ax.axhline(u.proposed, color=THROTTLE_COLOR, linewidth=1.2, label=f"proposed {human(u.proposed)}")
        ax.set_title(title, fontsize=8, loc="left")
        ax.set_ylabel(rate_unit(u.quota_type), fontsize=8)
        ax.yaxis.set_major_formatter(formatter)
        ax.tick_params(labelsize=8)
        ax.set_ylim(bottom=0)
        ax.set_xlim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.supxlabel("percentile of the entity's (broker, second) cells", fontsize=9)
    fig.suptitle("Usage distribution per entity vs current and proposed quota", fontsize=11)
    return to_png(fig)
