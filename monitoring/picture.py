#!/usr/bin/env python3
"""Draws the kubeflavor dashboard's main panels as an SVG from the scrapes of a run.

    KUBEFLAVOR_MONITORING_OUT=/tmp/run cargo test -p kubeflavor --test controller monitoring
    python3 monitoring/picture.py /tmp/run/timeline.json > monitoring/dashboard.svg

timeline.json holds the controller's and the join-token API's /metrics after each step of
the e2e test's walkthrough-sized run. Each panel shows what the dashboard's panel of the
same title shows, computed from those scrapes: gauges as they were after each step,
counters as their increase over the step (the dashboard shows them per second), latency
quantiles from the histograms at the end of the run, as histogram_quantile() computes
them. Object names are shown without the run's suffix. Python's standard library only.
"""

import json
import re
import sys
from html import escape

PALETTE = ["#3274d9", "#e0752d", "#56a64b", "#a352cc", "#f2cc0c", "#e02f44", "#8ab8ff", "#96d98d"]
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m:
            labels = dict(LABEL.findall(m.group(3) or ""))
            out.append((m.group(1), labels, float(m.group(4))))
    return out


class Run:
    def __init__(self, timeline):
        self.suffix = "-" + timeline["run_id"]
        self.steps = [s["step"] for s in timeline["steps"]]
        self.samples = [parse(s["controller"]) + parse(s["serve"]) for s in timeline["steps"]]

    def name(self, value):
        return value[: -len(self.suffix)] if value.endswith(self.suffix) else value

    def series(self, metric, by, where=None, agg=sum):
        """{legend: [value per step]}: `metric` summed (or `agg`) by the labels `by`."""
        out = {}
        for i, samples in enumerate(self.samples):
            groups = {}
            for name, labels, value in samples:
                if name != metric or (where and not where(labels)):
                    continue
                key = " ".join(self.name(labels.get(b, "")) for b in by) or metric
                groups.setdefault(key, []).append(value)
            for key, values in groups.items():
                out.setdefault(key, [None] * len(self.samples))[i] = agg(values)
        return out

    def increases(self, metric, by, where=None):
        """A counter's increase over each step, by the labels `by`."""
        out = {}
        for key, values in self.series(metric, by, where).items():
            prev, inc = 0.0, []
            for v in values:
                v = prev if v is None else v
                inc.append(max(v - prev, 0.0))
                prev = v
            out[key] = inc
        return out

    def last(self, metric, agg=max, where=None):
        values = [v for n, l, v in self.samples[-1] if n == metric and (not where or where(l))]
        return agg(values) if values else None

    def quantile(self, q, metric, where=None):
        """histogram_quantile(q, sum by (le) (metric_bucket)) at the end of the run."""
        buckets = {}
        for name, labels, value in self.samples[-1]:
            if name == metric + "_bucket" and (not where or where(labels)):
                le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
                buckets[le] = buckets.get(le, 0.0) + value
        bounds = sorted(buckets)
        if not bounds or buckets[bounds[-1]] == 0:
            return None
        rank = q * buckets[bounds[-1]]
        lower, below = 0.0, 0.0
        for le in bounds:
            if buckets[le] >= rank:
                if le == float("inf"):
                    return lower
                return lower + (le - lower) * (rank - below) / max(buckets[le] - below, 1e-12)
            lower, below = le, buckets[le]
        return lower


class Svg:
    def __init__(self, width):
        self.width, self.parts, self.height = width, [], 0

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, color="#d8d9da", anchor="start", weight="normal"):
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{color}" '
                 f'text-anchor="{anchor}" font-weight="{weight}">{escape(str(s))}</text>')

    def panel(self, x, y, w, h, title):
        self.add(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="#181b1f" stroke="#2c3235"/>')
        self.text(x + 10, y + 20, title, 13, "#ccccdc", weight="bold")
        self.height = max(self.height, y + h)

    def render(self):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height + 10}" '
                f'font-family="Inter, Helvetica, Arial, sans-serif">'
                f'<rect width="100%" height="100%" fill="#111217"/>' + "".join(self.parts) + "</svg>\n")


def fmt(v, unit=""):
    if v is None:
        return "no data"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.1f} s"
    return f"{v:g}"


def stat(svg, x, y, w, title, value, unit="", bad=None):
    """One value, or several (a list) shown side by side as the dashboard's stat does."""
    svg.panel(x, y, w, 80, title)
    values = value if isinstance(value, list) else [value]
    color = "#e02f44" if bad is not None and any(v is not None and v > bad for v in values) else "#73bf69"
    svg.text(x + w / 2, y + 62, " / ".join(fmt(v, unit) for v in values), 28, color, "middle", "bold")


def chart(svg, x, y, w, h, title, series, steps, stack=False):
    """Lines with a point per step (stacked, as the dashboard's panel is, with `stack`);
    the legend below."""
    svg.panel(x, y, w, h, title)
    if stack:
        below = [0.0] * len(steps)
        stacked = {}
        for key, vs in sorted(series.items()):
            below = [b + (v or 0) for b, v in zip(below, vs)]
            stacked[key] = [b if v is not None else None for b, v in zip(below, vs)]
        series = stacked
    left, top, right, bottom = x + 40, y + 32, x + w - 12, y + h - 46
    values = [v for vs in series.values() for v in vs if v is not None]
    top_value = max(values + [1.0])
    for frac in (0, 0.5, 1):
        gy = bottom - frac * (bottom - top)
        svg.add(f'<line x1="{left}" y1="{gy:.1f}" x2="{right}" y2="{gy:.1f}" stroke="#2c3235"/>')
        svg.text(left - 6, gy + 4, f"{top_value * frac:g}", 10, "#8e8e8e", "end")
    n = len(steps)
    xs = [left + (right - left) * (i / max(n - 1, 1)) for i in range(n)]
    for i, sx in enumerate(xs):
        svg.text(sx, bottom + 14, str(i + 1), 10, "#8e8e8e", "middle")
    for k, (key, vs) in enumerate(sorted(series.items())):
        color = PALETTE[k % len(PALETTE)]
        points = [(xs[i], bottom - (v / top_value) * (bottom - top)) for i, v in enumerate(vs) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            svg.add(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for px, py in points:
            svg.add(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>')
        lx = x + 12 + (k % 3) * ((w - 24) / 3)
        ly = bottom + 30 + (k // 3) * 13
        svg.add(f'<rect x="{lx:.1f}" y="{ly - 8:.1f}" width="10" height="3" fill="{color}"/>')
        svg.text(lx + 14, ly - 3, key[:44], 10, "#ccccdc")


def bars(svg, x, y, w, h, title, rows, unit="s"):
    """Horizontal bars: [(label, value)]."""
    svg.panel(x, y, w, h, title)
    values = [v for _, v in rows if v is not None]
    top = max(values + [1e-9])
    for i, (label, v) in enumerate(rows):
        by = y + 40 + i * 22
        svg.text(x + 12, by + 11, label, 11, "#ccccdc")
        offset = min(250, w / 2)
        length = 0 if v is None else (w - offset - 80) * v / top
        svg.add(f'<rect x="{x + offset}" y="{by}" width="{length:.1f}" height="14" fill="{PALETTE[i % 2]}"/>')
        svg.text(x + offset + 6 + length, by + 11, fmt(v, unit), 11, "#d8d9da")


def main():
    run = Run(json.load(open(sys.argv[1])))
    steps, W, G = run.steps, 1200, 10
    svg = Svg(W)
    svg.text(G, 24, "kubeflavor", 18, "#ccccdc", weight="bold")
    svg.text(G + 110, 24, "the dashboard's panels, drawn from the scrapes of a walkthrough-sized run (e2e test "
             "'monitoring'): x = the run's steps, listed at the bottom", 12, "#8e8e8e")
    y = 36
    w5 = (W - 6 * G) / 5
    bound = run.series("kubeflavor_bound_nodes", ["flavor"])
    stat(svg, G, y, w5, "Bound nodes", sum(v[-1] or 0 for v in bound.values()))
    stat(svg, G * 2 + w5, y, w5, "Flavored nodes", run.last("kubeflavor_flavored_nodes"))
    stat(svg, G * 3 + 2 * w5, y, w5, "Revoked: bindings, listed names",
         [run.last("kubeflavor_revoked_bindings"), run.last("kubeflavor_revocation_list_names")])
    stat(svg, G * 4 + 3 * w5, y, w5, "Oldest unflavored Node",
         run.last("kubeflavor_oldest_unflavored_node_age_seconds"), "s", 600)
    stat(svg, G * 5 + 4 * w5, y, w5, "Leader", run.last("kubeflavor_leader", sum))
    y += 80 + G
    w2, h = (W - 3 * G) / 2, 200
    chart(svg, G, y, w2, h, "Bound nodes by flavor (stacked)", bound, steps, stack=True)
    levels = {}
    info = {l["flavor"]: l["trust_level"] for n, l, v in run.samples[-1] if n == "kubeflavor_flavor_info"}
    for i, samples in enumerate(run.samples):
        for n, l, v in samples:
            if n == "kubeflavor_bound_nodes" and l["flavor"] in info:
                key = "trust level " + info[l["flavor"]]
                levels.setdefault(key, [None] * len(steps))
                levels[key][i] = (levels[key][i] or 0) + v
    chart(svg, G * 2 + w2, y, w2, h, "Bound nodes by trust level (stacked)", levels, steps, stack=True)
    y += h + G
    w3 = (W - 4 * G) / 3
    decided = run.increases("kubeflavor_csr_decisions_total", ["outcome"], lambda l: l["outcome"] != "ignored")
    chart(svg, G, y, w3, h, "Kubelet client CSR decisions (per step)", decided, steps)
    denials = {k: v for k, v in run.increases("kubeflavor_csr_decisions_total", ["cause"],
                                                lambda l: l["outcome"] == "denied").items() if any(v)}
    chart(svg, G * 2 + w3, y, w3, h, "Denials by cause (per step)", denials, steps)
    chart(svg, G * 3 + 2 * w3, y, w3, h, "Tokens deleted after denials (per step)",
          {"deleted": run.increases("kubeflavor_tokens_deleted_total", [])["kubeflavor_tokens_deleted_total"]}, steps)
    y += h + G
    lat = []
    for title, metric, where in [
        ("CSR: waiting for a turn", "kubeflavor_stage_duration_seconds",
         lambda l: l.get("controller") == "csr" and l.get("stage") == "queue"),
        ("CSR: decide and approve", "kubeflavor_csr_decision_duration_seconds", None),
        ("Node -> flavored", "kubeflavor_node_flavoring_duration_seconds", None),
    ]:
        lat += [(f"{title} p50", run.quantile(0.5, metric, where)), (f"{title} p99", run.quantile(0.99, metric, where))]
    bars(svg, G, y, W - 2 * G, 40 + 22 * len(lat), "Latency at the end of the run (histogram_quantile over the run's histograms)",
         [(label.replace("CSR: ", "CSR ").replace("Node -> flavored", "Node flavored"), v) for label, v in lat])
    y += 40 + 22 * len(lat) + G
    chart(svg, G, y, w3, h, "Join-token API: mints by flavor (per step)",
          run.increases("kubeflavor_serve_join_tokens_minted_total", ["flavor"]), steps)
    chart(svg, G * 2 + w3, y, w3, h, "Join-token API: mints by caller (per step)",
          run.increases("kubeflavor_serve_join_tokens_minted_total", ["caller"]), steps)
    answers = {k: v for k, v in run.increases("kubeflavor_serve_responses_total", ["code"]).items() if any(v)}
    chart(svg, G * 3 + 2 * w3, y, w3, h, "Join-token API: answers by status code (per step)", answers, steps)
    y += h + G
    kinds = run.series("kubeflavor_competing_approvals", ["kind"], agg=max)
    bars(svg, G, y, w3, h, "Competing approvals (at the end)", [(k, v[-1]) for k, v in sorted(kinds.items())], "")
    chart(svg, G * 2 + w3, y, w3, h, "Leader", {"leader": run.series("kubeflavor_leader", [], agg=max)["kubeflavor_leader"]}, steps)
    chart(svg, G * 3 + 2 * w3, y, w3, h, "API writes (per step)", {"writes": run.increases("kubeflavor_api_writes_total", [])["kubeflavor_api_writes_total"]}, steps)
    y += h + G
    svg.text(G, y + 14, "Steps: " + "   ".join(f"{i + 1} {s}" for i, s in enumerate(steps)), 11, "#8e8e8e")
    svg.height = y + 20
    sys.stdout.write(svg.render())


if __name__ == "__main__":
    main()
