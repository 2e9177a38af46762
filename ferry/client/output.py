"""How client commands print: a table for people, ``-o json`` / ``-o yaml`` for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml


def render(
    data: Any, fmt: str, columns: Sequence[str] | None = None, rows: Sequence[dict[str, Any]] | None = None
) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=True)
    if fmt == "yaml":
        return str(yaml.safe_dump(data, sort_keys=True)).rstrip()
    if columns is None or rows is None:
        return str(yaml.safe_dump(data, sort_keys=False)).rstrip()
    return table(columns, rows)


def table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    head = "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join([head.rstrip(), *body])


def concurrency_table(conc: dict[str, Any]) -> str:
    """A status's adaptive concurrency (docs/delivery.md): a heading line, then each worker's
    limit toward the endpoint's origin."""
    head = f"concurrency: {conc['mode']} {conc['min']}-{conc['max']} toward {conc['origin']}"
    workers = conc.get("workers") or {}
    if not workers:
        return head + " (no worker pushes there yet)"
    cols = ["worker", "limit", "probing", "in_flight", "waiting", "no_queue_latency_ms", "overloads", "sharing"]
    rows = [{"worker": wid, **doc} for wid, doc in sorted(workers.items())]
    return head + "\n" + table(cols, rows)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list | tuple):
        return ",".join(map(str, v))
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"))
    return str(v)
