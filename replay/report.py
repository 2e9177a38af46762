"""``report.html``: the replay's figures for someone who never saw Ferry (matplotlib, embedded)."""

from __future__ import annotations

import base64
import html
import io
import json
from typing import Any

import pandas as pd


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _table(df: pd.DataFrame, limit: int = 50) -> str:
    if df.empty:
        return "<p class='muted'>none</p>"
    return str(df.head(limit).to_html(index=False, border=0, classes="t", escape=True))


def render(
    summary: dict[str, Any],
    timeline: pd.DataFrame,
    handoffs: pd.DataFrame,
    stale: pd.DataFrame,
    per_minute: pd.DataFrame,
) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images: list[tuple[str, str, str]] = []
    if not timeline.empty:
        timeline = timeline.assign(
            time=pd.to_datetime(timeline["ts"], unit="ms"),
            key=timeline["subscription"]
            + "/"
            + timeline["topic"]
            + "/"
            + timeline["partition"].astype(str)
            + timeline["cluster"].map(lambda c: "" if c == "default" else f"@{c}"),
        )
        keys = timeline["key"].value_counts().index[:12]
        fig, ax = plt.subplots(figsize=(10, 4))
        for k in keys:
            t = timeline[timeline["key"] == k]
            ax.step(t["time"], t["committed"], where="post", label=k)
        ax.set_ylabel("committed offset")
        ax.legend(fontsize=7, loc="upper left")
        images.append(
            ("Commit progress", "The committed watermark of each partition over time (up to 12 busiest).", _png(fig))
        )
        fig, ax = plt.subplots(figsize=(10, 3))
        for k in keys:
            t = timeline[timeline["key"] == k]
            ax.plot(t["time"], t["acked_span"], label=k)
        ax.set_ylabel("acked above watermark")
        images.append(
            (
                "Ack gaps",
                "Offsets acknowledged above the watermark: how out of order the endpoint answers. "
                "A restore from the watermark alone would push these again; Ferry restores them as acknowledged.",
                _png(fig),
            )
        )
    if not per_minute.empty:
        pm = per_minute.assign(time=pd.to_datetime(per_minute["minute"], unit="ms"))
        fig, ax = plt.subplots(figsize=(10, 3))
        for sub, t in pm.groupby("subscription"):
            ax.bar(t["time"], t["offsets_acknowledged"], width=0.0006, label=str(sub))
        ax.set_ylabel("offsets acknowledged / min")
        ax.legend(fontsize=7)
        images.append(("Throughput", "Offsets acknowledged per minute, per subscription.", _png(fig)))
    sections = "".join(
        f"<h2>{html.escape(t)}</h2><p>{html.escape(d)}</p><img alt='{html.escape(t)}' src='{src}'>"
        for t, d, src in images
    )
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Ferry offset replay</title>
<style>body{{font:14px system-ui,sans-serif;max-width:1100px;margin:2rem auto;color:#1b2430}}img{{max-width:100%}}
table.t{{border-collapse:collapse}}
table.t td,table.t th{{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:right}}
.muted{{color:#667}}pre{{background:#f6f8fa;padding:1rem}}</style></head><body>
<h1>Ferry offset replay</h1>
<p>Ferry pushes Kafka records to HTTP endpoints and keeps, per partition, a <b>committed watermark</b> (every offset
below it was acknowledged) and the <b>acknowledged ranges above it</b>. This report rebuilds that history from the
offsets topic.</p>
<h2>Summary</h2><pre>{html.escape(json.dumps(summary, indent=2))}</pre>
{sections}
<h2>Handoffs</h2><p>Each time a partition changed owner (a new ownership epoch). <i>uncommitted_acked</i> is what a
watermark-only restore would have delivered twice.</p>{_table(handoffs)}
<h2>Stale-epoch writes</h2><p>Writes by an owner that had already been fenced out. Restores ignore them;
there should be none in a healthy cluster.</p>{_table(stale)}
</body></html>"""
