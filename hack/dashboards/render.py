#!/usr/bin/python3
"""Render flowlens' dashboards from a lab run's query results to PNG.

Grafana does not run on this machine, so this draws what each dashboard
shows: every panel at its place on Grafana's 24-column grid, with its title,
from the results test/dashboards wrote (FLOWLENS_DASHBOARDS_RESULTS, `make
dashboards-render`): time series as lines (stacked where the panel stacks),
stat panels as their last value with a sparkline, bar gauges as bars, tables
as tables, node graphs as nodes on a circle with arrows. Units are
formatted as Grafana formats them.

    /usr/bin/python3 hack/dashboards/render.py results.json docs/img/dashboards

Needs python3-matplotlib (Debian; `make deps-render`).
"""

import json
import math
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

BG = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
TEXT = "#ccccdc"
MUTED = "#8e8e9a"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2",
           "#b877d9", "#705da0", "#37872d", "#fade2a", "#447ebc", "#c15c17"]

UNIT_W_IN = 0.78  # inches per grid column
UNIT_H_IN = 0.42  # inches per grid row (Grafana: 30 px)


def si(v, base, steps, suffix, prefixes):
    """Scale v by base through the prefixes: 1234 -> "1.23 k" + suffix."""
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "–"
    a = abs(v)
    i = 0
    while a >= base and i < steps:
        a /= base
        v /= base
        i += 1
    digits = 0 if abs(v) >= 100 else (1 if abs(v) >= 10 else 2)
    if v == int(v) and i == 0:
        digits = 0
    return f"{v:.{digits}f} {prefixes[i]}{suffix}".rstrip()


def fmt(v, unit):
    """Format v as Grafana formats the unit."""
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "–"
    dec = ["", "k", "M", "G", "T"]
    if unit == "Bps":
        return si(v, 1000, 4, "B/s", dec)
    if unit == "pps":
        return si(v, 1000, 4, "p/s", dec)
    if unit == "bytes":
        return si(v, 1024, 4, "B", ["", "Ki", "Mi", "Gi", "Ti"])
    if unit == "percentunit":
        return f"{v * 100:.1f}%" if v < 1 else f"{v * 100:.0f}%"
    if unit in ("s", "ns"):
        ns = v * 1e9 if unit == "s" else v
        if ns == 0:
            return "0 s"
        for div, name in ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1, "ns")):
            if abs(ns) >= div:
                x = ns / div
                return f"{x:.{0 if x >= 100 else (1 if x >= 10 else 2)}f} {name}"
        return f"{ns:.2f} ns"
    # short
    if abs(v) < 1 and v != 0:
        return f"{v:.3g}"
    return si(v, 1000, 4, "", dec)


def values(series):
    return [p[1] for p in series["points"] if p[1] is not None]


def last(series):
    vs = values(series)
    return vs[-1] if vs else None


def short(name, n=42):
    return name if len(name) <= n else name[: n - 1] + "…"


def style_axes(ax):
    ax.set_facecolor(PANEL)
    for s in ax.spines.values():
        s.set_visible(False)
    ax.tick_params(colors=MUTED, labelsize=7, length=0)
    ax.grid(True, color="#23272c", linewidth=0.6)


def draw_timeseries(ax, panel):
    style_axes(ax)
    lines = []
    for t in panel["targets"]:
        for s in t["series"]:
            lines.append(s)
    # The legend lists the largest first, like a sorted Grafana legend.
    lines.sort(key=lambda s: -(max(values(s)) if values(s) else 0))
    unit = panel["unit"]
    if panel.get("stacked") and lines:
        xs = sorted({p[0] for s in lines for p in s["points"]})
        ys = []
        for s in lines:
            m = {p[0]: (p[1] or 0.0) for p in s["points"]}
            ys.append([m.get(x, 0.0) for x in xs])
        ax.stackplot(xs, ys, colors=PALETTE[: len(ys)] * (len(ys) // len(PALETTE) + 1),
                     alpha=0.55, linewidth=0.8, labels=[short(s["name"]) for s in lines])
    else:
        for i, s in enumerate(lines):
            xs = [p[0] for p in s["points"]]
            ys = [p[1] if p[1] is not None else float("nan") for p in s["points"]]
            c = PALETTE[i % len(PALETTE)]
            ax.plot(xs, ys, color=c, linewidth=1.2, label=short(s["name"]))
            ax.fill_between(xs, ys, color=c, alpha=0.08)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, unit)))
    ax.yaxis.set_major_locator(MaxNLocator(4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}s"))
    ax.xaxis.set_major_locator(MaxNLocator(6))
    if lines:
        leg = ax.legend(loc="upper left", fontsize=6.5, frameon=False, labelcolor=TEXT,
                        ncol=1 if len(lines) <= 4 else 2, handlelength=1.2)
        for h in getattr(leg, "legend_handles", None) or leg.legendHandles:
            h.set_alpha(1)


def draw_stat(ax, panel):
    ax.set_facecolor(PANEL)
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    series = [s for t in panel["targets"] for s in t["series"]]
    if not series:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)
        return
    s = series[0]
    pts = [(p[0], p[1]) for p in s["points"] if p[1] is not None]
    if len(pts) > 1:
        xs, ys = zip(*pts)
        top = max(ys) or 1
        ax.fill_between(xs, [y / top * 0.45 for y in ys], color=PALETTE[0], alpha=0.25)
        ax.plot(xs, [y / top * 0.45 for y in ys], color=PALETTE[0], linewidth=1)
        ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(0, 1)
    ax.text(0.5, 0.62, fmt(last(s), panel["unit"]), color=PALETTE[0], fontsize=20,
            fontweight="bold", ha="center", va="center", transform=ax.transAxes)


def draw_bargauge(ax, panel):
    ax.set_facecolor(PANEL)
    for s in ax.spines.values():
        s.set_visible(False)
    series = [s for t in panel["targets"] for s in t["series"] if last(s) is not None]
    series.sort(key=lambda s: -last(s))
    series = series[:8]
    if not series:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)
        return
    top = max(last(s) for s in series) or 1
    n = max(len(series), 4)  # bars keep their height when there are few
    ax.set_xlim(0, 1)
    ax.set_ylim(0, n)
    ax.set_xticks([])
    ax.set_yticks([])
    for i, s in enumerate(series):
        y = n - i - 1
        v = last(s)
        ax.text(0.005, y + 0.72, short(s["name"], 70), color=TEXT, fontsize=7, va="center")
        ax.barh(y + 0.3, 0.86, height=0.36, left=0.0, color="#22252b")
        ax.barh(y + 0.3, 0.86 * v / top, height=0.36, left=0.0, color=PALETTE[i % len(PALETTE)], alpha=0.85)
        ax.text(0.995, y + 0.3, fmt(v, panel["unit"]), color=PALETTE[i % len(PALETTE)], fontsize=8,
                fontweight="bold", ha="right", va="center")


def draw_table(ax, panel):
    ax.set_facecolor(PANEL)
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    series = [s for t in panel["targets"] for s in t["series"] if last(s) is not None]
    series.sort(key=lambda s: -last(s))
    if not series:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)
        return
    # Source labels before destination ones, as the table reads left to right.
    cols = sorted({k for s in series for k in s["labels"]}, key=lambda c: (not c.startswith("src_"), c))
    header = cols + ["Value"]
    rows = [[s["labels"].get(c, "") for c in cols] + [fmt(last(s), panel["unit"])] for s in series[:10]]
    tbl = ax.table(cellText=rows, colLabels=header, loc="upper center", cellLoc="left", colLoc="left",
                   bbox=[0, max(0, 1 - 0.11 * (len(rows) + 1)), 1, min(1, 0.11 * (len(rows) + 1))])
    tbl.auto_set_font_size(False)
    tbl.set_fontsize(7)
    for (r, _), cell in tbl.get_celld().items():
        cell.set_edgecolor(BORDER)
        cell.set_facecolor("#1f2228" if r == 0 else PANEL)
        cell.get_text().set_color(TEXT if r else MUTED)


def draw_nodegraph(ax, panel):
    """Grafana's Node Graph: the nodes query's ids on a circle, sized by
    their value, and the edges query's source -> target arrows, as wide as
    their share of the largest edge."""
    ax.set_facecolor(PANEL)
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    nodes = {s["labels"].get("id", ""): last(s) or 0 for s in panel["targets"][0]["series"] or []}
    edges = [(s["labels"].get("source", ""), s["labels"].get("target", ""), last(s) or 0)
             for s in panel["targets"][1]["series"] or []]
    if not nodes:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)
        return
    names = sorted(nodes)
    pos = {n: (math.cos(2 * math.pi * i / len(names)), math.sin(2 * math.pi * i / len(names))) for i, n in enumerate(names)}
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.3, 1.3)
    top_e = max((v for _, _, v in edges), default=1) or 1
    for src, dst, v in edges:
        if src not in pos or dst not in pos or src == dst:
            continue
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", color=PALETTE[2], alpha=0.7, lw=0.5 + 3 * v / top_e,
                                    shrinkA=14, shrinkB=14, connectionstyle="arc3,rad=0.12"))
    top_n = max(nodes.values()) or 1
    for i, n in enumerate(names):
        x, y = pos[n]
        ax.scatter([x], [y], s=250 + 700 * nodes[n] / top_n, color=PANEL, edgecolors=PALETTE[0], linewidths=2, zorder=3)
        ax.text(x, y - 0.2, short(n, 30), color=TEXT, fontsize=7, ha="center", va="top", zorder=4)
        ax.text(x, y, fmt(nodes[n], panel["unit"]), color=TEXT, fontsize=6, ha="center", va="center", zorder=4)


DRAW = {"timeseries": draw_timeseries, "stat": draw_stat, "bargauge": draw_bargauge, "table": draw_table,
        "nodeGraph": draw_nodegraph}


def render(board, lab, out):
    panels = board["panels"]
    rows = {}
    for p in panels:
        g = p["gridPos"]
        rows.setdefault(p["row"], g["y"] - 1)
    height_units = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) + 1.6
    W, H = 24 * UNIT_W_IN, height_units * UNIT_H_IN
    fig = plt.figure(figsize=(W, H), dpi=80, facecolor=BG)

    def box(x, y, w, h):  # grid units -> figure fraction, y from the top
        top_pad = 1.6
        return (x / 24, 1 - (y + h + top_pad) / height_units, w / 24, h / height_units)

    fig.text(0.006, 1 - 0.55 / height_units, board["title"], color=TEXT, fontsize=15, fontweight="bold", va="center")
    fig.text(0.006, 1 - 1.15 / height_units, "\n".join(textwrap.wrap(
        "Rendered from the lab run's Prometheus query results (test/dashboards): " + lab, 250)),
             color=MUTED, fontsize=7.5, va="center")
    for title, y in rows.items():
        x0, y0, _, _ = box(0, y, 24, 1)
        fig.text(x0 + 0.004, y0 + 0.45 / height_units, "⌄ " + title, color=TEXT, fontsize=10.5, fontweight="bold", va="center")
    gap = 0.12
    for p in panels:
        g = p["gridPos"]
        x, y, w, h = box(g["x"] + gap, g["y"] + gap, g["w"] - 2 * gap, g["h"] - 2 * gap)
        bg = fig.add_axes((x, y, w, h))
        bg.set_xticks([])
        bg.set_yticks([])
        bg.set_facecolor(PANEL)
        for s in bg.spines.values():
            s.set_color(BORDER)
        bg.text(0.012, 1 - 0.32 / (g["h"] - 2 * gap), p["title"], color=TEXT, fontsize=8.5, fontweight="bold",
                va="center", transform=bg.transAxes)
        pad_top, pad = 0.75, 0.25
        ix, iy, iw, ih = box(g["x"] + gap + pad + (0.55 if p["type"] == "timeseries" else 0),
                             g["y"] + gap + pad_top, g["w"] - 2 * gap - 2 * pad - (0.55 if p["type"] == "timeseries" else 0),
                             g["h"] - 2 * gap - pad_top - pad - (0.25 if p["type"] == "timeseries" else 0))
        ax = fig.add_axes((ix, iy, iw, ih))
        DRAW.get(p["type"], draw_timeseries)(ax, p)
    fig.savefig(out, facecolor=BG)
    plt.close(fig)
    print(f"wrote {out}")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: render.py results.json outdir")
    with open(sys.argv[1]) as f:
        res = json.load(f)
    os.makedirs(sys.argv[2], exist_ok=True)
    for b in res["dashboards"]:
        name = b["file"].removesuffix(".json") + ".png"
        render(b, res.get("lab", ""), os.path.join(sys.argv[2], name))


if __name__ == "__main__":
    main()
