"""Worker memory with many partitions behind a slow endpoint: RSS over time, peak and steady.

Run: python3 bench/memory.py [--topics 10] [--partitions 100] [--per-partition 300] [--seconds 40]
     [--size 1000] [--delay 0.2-0.5] [--plot docs/bench/memory.png]

One static worker owns ``topics × partitions`` partitions (1,000 by default) that each hold
``per-partition`` records of ``size`` bytes; the endpoint answers every push after a random
200–500 ms. The worker's RSS is sampled every 0.5 s for ``--seconds``. Baseline in the same run:
the same worker on 12 partitions holding the same total number of records. ``--env K=V`` passes
settings to every worker (e.g. FERRY_PREFETCH_RECORDS=100); ``--case NAME:K=V;K=V`` adds a
1,000-partition run with other settings (``max_in_flight=N`` there sets the subscription's window).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _results
from bench._harness import Stack, create_topic, http, produce_even, rss_mb, sub
from ferry.config import WorkerSettings


def sample(s: Stack, name: str, topics: list[str], seconds: float, env: dict[str, str]) -> dict[str, object]:
    s.reset(*DELAY)
    env = dict(env)
    in_flight = int(env.pop("max_in_flight", IN_FLIGHT))
    w = s.worker(name, [sub(name, topics, s.ep, max_in_flight=in_flight)], env=env)
    pid = w.proc.pid  # type: ignore[union-attr]
    started = time.monotonic()
    series: list[tuple[float, float, int]] = []
    held = 0
    while time.monotonic() - started < seconds:
        assert w.alive(), w.log_tail()
        series.append((time.monotonic() - started, rss_mb(pid), int(s.stats()["count"])))
        parts = http("GET", f"http://127.0.0.1:{w.port}/stats")["partitions"]
        held = max(held, sum(p["buffered"] + p["in_flight"] for p in parts))
        time.sleep(0.5)
    w.stop()
    rss = [r for _, r, _ in series]
    tail = rss[len(rss) * 2 // 3 :]
    return {
        "name": name,
        "series": series,
        "peak": max(rss),
        "steady": statistics.median(tail),
        "delivered": series[-1][2],
        "held": held,
        "rate": series[-1][2] / series[-1][0],
    }


DELAY = (0.2, 0.5)
IN_FLIGHT = 100


def plot(path: Path, runs: list[dict[str, object]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    for r in runs:
        series = r["series"]
        assert isinstance(series, list)
        ax.plot([t for t, _, _ in series], [m for _, m, _ in series], label=str(r["label"]))
    ax.set_xlabel("seconds since the worker started")
    ax.set_ylabel("worker RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(f"Worker RSS, endpoint answering in {DELAY[0] * 1000:.0f}–{DELAY[1] * 1000:.0f} ms")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"plot written to {path}")


def main() -> None:
    global DELAY, IN_FLIGHT
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100, help="partitions per topic")
    ap.add_argument("--per-partition", type=int, default=300, help="records in each of the many partitions")
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--in-flight", type=int, default=100, help="max_in_flight per partition")
    ap.add_argument("--delay", default="0.2-0.5", help="endpoint answer time range, seconds")
    ap.add_argument("--env", action="append", default=[], help="K=V for every worker (repeatable)")
    ap.add_argument("--case", action="append", default=[], help="NAME:K=V;K=V extra many-partition run")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--plot", type=Path, default=None)
    a = ap.parse_args()
    lo, _, hi = a.delay.partition("-")
    DELAY = (float(lo), float(hi or lo))
    IN_FLIGHT = a.in_flight
    env = dict(kv.split("=", 1) for kv in a.env)
    many = a.topics * a.partitions
    total = many * a.per_partition
    runs: list[dict[str, object]] = []
    with Stack("ferry-bench-memory-") as s:
        t0 = time.monotonic()
        topics = [f"mem{i}" for i in range(a.topics)]
        for t in topics:
            create_topic(s.bootstrap, t, a.partitions)
            produce_even(s.bootstrap, t, a.partitions, a.per_partition, a.size)
        print(f"produced {total:,} records of {a.size} B into {many:,} partitions in {time.monotonic() - t0:.0f} s")
        if not a.no_baseline:
            create_topic(s.bootstrap, "mem-base", 12)
            produce_even(s.bootstrap, "mem-base", 12, total // 12, a.size)
            r = sample(s, "mem-base", ["mem-base"], a.seconds, env)
            r["label"] = f"12 partitions × {total // 12:,} records"
            runs.append(r)
            print(f"  {r['label']}: peak {r['peak']:.0f} MB, steady {r['steady']:.0f} MB", flush=True)
        r = sample(s, "mem-many", topics, a.seconds, env)
        r["label"] = f"{many:,} partitions × {a.per_partition} records"
        runs.append(r)
        print(f"  {r['label']}: peak {r['peak']:.0f} MB, steady {r['steady']:.0f} MB", flush=True)
        for case in a.case:
            label, _, kvs = case.partition(":")
            extra = env | dict(kv.split("=", 1) for kv in kvs.split(";") if kv)
            r = sample(s, f"mem-{len(runs)}", topics, a.seconds, extra)
            r["label"] = f"{many:,} partitions, {label}"
            runs.append(r)
            print(f"  {r['label']}: peak {r['peak']:.0f} MB, steady {r['steady']:.0f} MB", flush=True)
    print()
    print(
        f"endpoint answers in {DELAY[0] * 1000:.0f}-{DELAY[1] * 1000:.0f} ms; {a.size} B records; "
        f"worker env {env or 'defaults'}"
    )
    print(f"{'run':52} {'peak MB':>8} {'steady MB':>9} {'max held':>8} {'delivered':>9} {'rec/s':>6}")
    for r in runs:
        print(
            f"{r['label']!s:52} {r['peak']:>8.0f} {r['steady']:>9.0f} {r['held']:>8,} "
            f"{r['delivered']:>9,} {r['rate']:>6.0f}"
        )
    print(f"steady = median RSS over the last third of {a.seconds:.0f} s; held = most records buffered + in flight")
    if a.plot:
        plot(a.plot, runs)
    save(ap, a, runs, env, many)


MIB = 1024 * 1024


def save(
    ap: argparse.ArgumentParser, a: argparse.Namespace, runs: list[dict[str, object]], env: dict[str, str], many: int
) -> None:
    """The table of this run into bench/results/memory.json: a row per run, partitions owned, the
    most records held, peak RSS."""
    defaults = WorkerSettings()
    budget_records = int(env.get("FERRY_PREFETCH_BUDGET_RECORDS", defaults.prefetch_budget_records))
    budget_bytes = int(env.get("FERRY_PREFETCH_BUDGET_BYTES", defaults.prefetch_budget_bytes))
    budgets = f"prefetch budgets {budget_records:,} records and {size_text(budget_bytes)}"
    if (budget_records, budget_bytes) == (defaults.prefetch_budget_records, defaults.prefetch_budget_bytes):
        budgets += ", the defaults"
    labels = ([] if a.no_baseline else ["12"]) + [f"{many:,} ({budgets})"]
    labels += [f"{many:,}, `{case.partition(':')[0]}`" for case in a.case]
    rows = [[label, f"{r['held']:,}", f"{r['peak']:.0f}"] for label, r in zip(labels, runs, strict=True)]
    size = f"{a.size // 1000} KB" if a.size % 1000 == 0 else f"{a.size:,} B"
    delay = f"{DELAY[0] * 1000:.0f}–{DELAY[1] * 1000:.0f} ms" if DELAY[0] != DELAY[1] else f"{DELAY[0] * 1000:.0f} ms"
    note = f"{size} records behind an endpoint answering in {delay}"
    if not a.no_baseline:  # what 12 partitions with a backlog hold, beside the byte budget
        held = runs[0]["held"]
        assert isinstance(held, int)
        note += f"; the 12 partitions held {held * a.size / MIB:,.0f} MiB of records"
        note += f" (byte budget {size_text(budget_bytes)})"
    columns = ["partitions owned by one worker", "records held", "peak RSS MB"]
    _results.save("memory", _results.command_line("python3 bench/memory.py", ap, a), columns, rows, note)


def size_text(n: int) -> str:
    return f"{n // MIB:,} MiB" if n % MIB == 0 else f"{n:,} B"


if __name__ == "__main__":
    main()
