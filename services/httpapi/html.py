"""HTML for the dashboard: escaped by construction, one page layout, tables, badges, and the
per-round metrics plot as inline SVG (so a page without JavaScript still shows it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from cairn.httpapi.models import MetricPoint

STATUS_CLASS = {"CONFIRMED": "ok", "SINGLE": "single", "CONTESTED": "warn", "FAILING": "bad",
                "UNTESTED": "none", "completed": "ok", "running": "single", "failed": "bad",
                "cancelled": "warn", "exited": "none"}
NAV = (("/", "Overview"), ("/recipes", "Recipes"), ("/sites", "Sites"),
       ("/evidence", "Evidence"))


class Html(str):
    """Markup that is already safe (everything else is escaped when it is put in)."""


def text(value: object) -> Html:
    return value if isinstance(value, Html) else Html(escape("" if value is None else
                                                              str(value)))


def tag(element: str, /, *children: object, **attrs: object) -> Html:
    shown = "".join(f' {k.rstrip("_").replace("_", "-")}="{escape(str(v))}"'
                    for k, v in attrs.items() if v is not None and v is not False)
    return Html(f"<{element}{shown}>{''.join(text(c) for c in children)}</{element}>")


def join(parts: Iterable[object]) -> Html:
    return Html("".join(text(p) for p in parts))


def badge(status: str) -> Html:
    return tag("span", status, class_=f"badge {STATUS_CLASS.get(status, 'none')}",
               data_status=status)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], **attrs: object) -> Html:
    head = tag("thead", tag("tr", join(tag("th", h) for h in headers)))
    body = tag("tbody", join(tag("tr", join(tag("td", c) for c in row)) for row in rows))
    return tag("table", head, body, **attrs)


def link(href: str, label: object) -> Html:
    return tag("a", label, href=href)


def page(title: str, body: Html, *, who: str, script: str | None = None,
         data: dict[str, str] | None = None) -> Html:
    nav = join(link(href, label) for href, label in NAV)
    attrs = {f"data_{k}": v for k, v in (data or {}).items()}
    scripts = tag("script", "", src=f"/static/{script}", defer="defer") if script else ""
    return Html("<!doctype html>" + tag(
        "html",
        tag("head", Html('<meta charset="utf-8">'),
            Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            tag("title", f"{title} · Cairn"),
            Html('<link rel="stylesheet" href="/static/dashboard.css">'), scripts),
        tag("body", tag("header", tag("strong", "Cairn"), tag("nav", nav),
                        tag("span", who, class_="who")),
            tag("main", tag("h1", title), body, **attrs)),
        lang="en"))


PLOT_W, PLOT_H, PAD = 640, 240, 36
SERIES_CLASS = {"accuracy": "accuracy", "loss": "loss"}


def metrics_plot(points: Sequence[MetricPoint], names: Sequence[str]) -> Html:
    """Each metric's mean over workers per round, one polyline each, scaled to its own
    range (accuracy and loss differ in scale); one circle per round, for the eye and tests."""
    rounds = sorted({p.step for p in points if p.step is not None})
    if not rounds:
        return tag("p", "No metrics reported yet.", class_="empty", id="plot-empty")
    lo, hi = rounds[0], max(rounds[-1], rounds[0] + 1)
    lines: list[Html] = []
    for name in names:
        means = []
        for rnd in rounds:
            values = [p.values[name] for p in points if p.step == rnd and name in p.values]
            if values:
                means.append((rnd, sum(values) / len(values)))
        if not means:
            continue
        vmin, vmax = min(v for _, v in means), max(v for _, v in means)
        span = (vmax - vmin) or 1.0
        xy = [(PAD + (r - lo) / (hi - lo) * (PLOT_W - 2 * PAD),
               PLOT_H - PAD - (v - vmin) / span * (PLOT_H - 2 * PAD)) for r, v in means]
        cls = SERIES_CLASS.get(name, "other")
        lines.append(tag("polyline", points=" ".join(f"{x:.1f},{y:.1f}" for x, y in xy),
                         class_=f"series {cls}", data_metric=name))
        lines += [tag("circle", tag("title", f"{name} round {r}: {v:.4g}"), cx=f"{x:.1f}",
                      cy=f"{y:.1f}", r="3", class_=f"point {cls}", data_metric=name,
                      data_round=r)
                  for (x, y), (r, v) in zip(xy, means, strict=True)]
    axis = tag("text", f"rounds {rounds[0]} to {rounds[-1]}", x=PAD, y=PLOT_H - 8,
               class_="axis")
    legend = join(tag("text", n, x=PLOT_W - PAD - 80, y=PAD + 14 * i,
                      class_=f"legend {SERIES_CLASS.get(n, 'other')}")
                  for i, n in enumerate(names))
    return tag("svg", axis, legend, join(lines), id="metrics-plot",
               viewBox=f"0 0 {PLOT_W} {PLOT_H}", role="img",
               aria_label="metrics per round", data_rounds=len(rounds))
