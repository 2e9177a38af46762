"""Record timestamp → endpoint latency at steady rates, ordering=key, and the maximum single-record
rate measured in the same run (a backlog run), so "half of the maximum" is known; the naive
hand-written loop (bench/naive_loop.py) beside the Ferry worker at every rate, as the baseline.

Run: python3 bench/latency.py [--rates 500,1000,2000,3000] [--seconds 10] [--backlog 30000]
     [--half] [--sustained] [--no-baseline] [--plot docs/bench/latency.png]

1. Backlog: ``--backlog`` records are produced first, then the naive loop and a worker (same
   settings as below) each deliver them; records/s (first to last receipt at the endpoint) = the
   maximum single-record rate of each on this machine.
2. Steady: for each rate, for the naive loop and then the worker, each on its own fresh topic
   (12 partitions): a consumer is started and warmed up (200 records), then a producer at that rate
   (CreateTime timestamps, ``linger.ms`` 5, librdkafka's default and Kafka 4's, ``--linger-ms``) for
   ``--seconds``; the consumer delivers to the trivial endpoint; p50/p95/p99 of record timestamp →
   endpoint receipt, CPU per 1,000 records of the consumer process, the broker, the endpoint and
   the script's producer, and the cores those four kept busy together. The worker:
   ``max_in_flight`` 32 per partition, ordering=key; the naive loop: its own process, 128 in
   flight, ``fetch.wait.max.ms`` 10 and ``fetch.queue.backoff.ms`` 10 (Ferry's defaults too).
   ``--half`` adds half of each measured maximum to the rates.
3. ``--sustained``: the backlog rate is not one the whole pipeline can carry, since a steady run
   also pays the producer and the broker's cost per small request on the same cores. For each
   consumer, rates of ``LADDER`` are tried upwards (``--probe-seconds`` each) until one is not
   kept up with (:func:`kept_up`: the producer makes the rate and no queue builds up); half of
   the highest kept-up rate is added to the rates.

The record timestamp is set by the producer when it produces, so the figure covers producer
batching, the broker, the consumer's fetch and the push. Producer, broker, consumer and endpoint
share the machine's cores. ``--env K=V`` passes settings to the worker (e.g. fetch settings).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer

from bench import _results
from bench._endpoint import percentile
from bench._harness import BENCH, Stack, cpu_seconds, create_topic, produce_steady, steady_rate, sub
from bench.delivery import produce
from ferry.devstack import embedded
from ferry.devstack.embedded import ServiceProcess

NAIVE_IN_FLIGHT = 128
WARM = 200


def naive(s: Stack, name: str, topic: str, partitions: int, total: int, consume_s: float) -> ServiceProcess:
    """The naive loop in its own process until it delivered ``total`` records (bounded: 300 s)."""
    argv = [sys.executable, str(BENCH / "naive_loop.py"), "--bootstrap", s.bootstrap, "--topic", topic]
    argv += ["--partitions", str(partitions), "--url", f"{s.ep}/hook", "--total", str(total)]
    return s.process(
        name, [*argv, "--in-flight", str(NAIVE_IN_FLIGHT), "--timeout-s", "300", "--consume-timeout-s", str(consume_s)]
    )


def steady(
    s: Stack, p: Producer, topic: str, rate: float, seconds: float, consumer: ServiceProcess
) -> dict[str, float]:
    s.reset()
    pids = {
        "consumer": consumer.proc.pid,  # type: ignore[union-attr]
        "broker": s.broker.proc.pid,  # type: ignore[union-attr]
        "endpoint": s.endpoint.proc.pid,  # type: ignore[union-attr]
        "producer": os.getpid(),
    }
    cpu0 = {who: cpu_seconds(pid) for who, pid in pids.items()}
    made = produce_steady(p, topic, rate, seconds)
    i, produced_s = made.n, made.seconds
    produced_at = time.monotonic()
    deadline = produced_at + 60
    while s.stats()["count"] < i and time.monotonic() < deadline and consumer.alive():
        time.sleep(0.05)
    drain_s = time.monotonic() - produced_at
    st = s.stats()
    spent = {who: cpu_seconds(pid) - cpu0[who] for who, pid in pids.items()}
    per_k = 1000 / max(1, st["count"])
    cpu = {f"{who}_ms": cpu_s * 1000 * per_k for who, cpu_s in spent.items()}
    # Cores the four processes kept busy together while the producer ran and the consumer drained.
    cores = sum(spent.values()) / (produced_s + drain_s)
    # produce() to the broker's acknowledgement: the part of the latency spent before the record
    # is in the log (the producer's linger and the broker's answer), whoever consumes it; and
    # from that acknowledgement to the endpoint: the consumer's part (the record was fetchable
    # by then at the latest).
    receipts = s.receipts()
    after = sorted(receipts[k] - at for k, at in made.acked_at.items() if k in receipts)
    return {
        "rate": rate,
        "achieved": i / produced_s,
        "n": i,
        "drain_s": drain_s,
        "cores": cores,
        "produce_p99_ms": made.produce_p99_ms(),
        "after_ack_p50_ms": percentile(after, 0.5),
        "after_ack_p99_ms": percentile(after, 0.99),
        **cpu,
        **st,
    }


Start = Callable[[int], ServiceProcess]


def run_rate(
    s: Stack, p: Producer, topic: str, partitions: int, rate: float, seconds: float, start: Start
) -> dict[str, float]:
    """A fresh topic; ``start(total)`` starts its consumer, which is warmed up, measured and stopped."""
    create_topic(s.bootstrap, topic, partitions)
    s.reset()  # an earlier run's count must not satisfy the warm-up wait
    c = start(WARM + int(rate * seconds))
    try:
        for i in range(WARM):
            p.produce(topic, key=f"k{i}".encode(), value=b"x" * 100)
        p.flush(10)
        s.wait_count(WARM, 60, [c])
        return steady(s, p, topic, rate, seconds, c)
    finally:
        c.stop()


# Rates tried by --sustained, in order, up to the consumer's backlog rate.
LADDER = (500, 750, 1000, 1250, 1500, 1750, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 10000)


def kept_up(r: dict[str, float]) -> bool:
    """The pipeline carried the rate: the producer produced it (97 %), every record arrived, the
    last one within 1 s of the producer's flush, and the latency did not grow through the run
    (median of the last quarter of receipts at most twice the first quarter's + 10 ms): no queue
    built up anywhere, in the producer, the broker or the consumer."""
    return (
        r["achieved"] >= 0.97 * r["rate"]
        and r["count"] >= r["n"]
        and r["drain_s"] <= 1.0
        and r["p50_last_quarter_ms"] <= 2 * r["p50_first_quarter_ms"] + 10
    )


def sustained_rate(
    s: Stack,
    p: Producer,
    who: str,
    partitions: int,
    seconds: float,
    cap: float,
    start: Callable[[str, int], ServiceProcess],
) -> float:
    """The highest rate of LADDER (up to ``cap``) that ``start``'s consumer kept up with, trying
    rates upwards until the first it did not keep up with; 0 when not even the first.
    ``start(topic, total)`` starts the consumer of a fresh topic."""
    best = 0.0
    for rate in (r for r in LADDER if r <= cap):
        topic = f"sus-{who}-{rate}"
        r = run_rate(s, p, topic, partitions, rate, seconds, functools.partial(start, topic))
        ok = kept_up(r)
        print(
            f"  sustained? {who} {rate:,}/s: produced {r['achieved']:,.0f}/s, last record {r['drain_s']:.2f} s "
            f"after the producer, p50 first/last quarter {r['p50_first_quarter_ms']:.1f}/"
            f"{r['p50_last_quarter_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms: {'yes' if ok else 'no'}",
            flush=True,
        )
        if not ok:
            break
        best = float(rate)
    return best


def backlog_rate(s: Stack, n: int, start: Callable[[], ServiceProcess]) -> tuple[float, float]:
    """(records/s first to last receipt, records/s from the process start) of ``start()`` on the backlog."""
    s.reset()
    started = time.monotonic()
    c = start()
    try:
        s.wait_count(n, 300, [c])
        return steady_rate(s.stats(), n), n / (time.monotonic() - started)
    finally:
        c.stop()


def plot(path: Path, rows: list[dict[str, Any]], max_rate: float, naive_max: float, sustained: float = 0.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["rate"])
    xs = [r["rate"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for key, style in (("p50_ms", "o-"), ("p95_ms", "s-"), ("p99_ms", "^-")):
        ax.plot(xs, [r["ferry"][key] for r in rows], style, label=f"Ferry {key.removesuffix('_ms')}")
    if naive_max:
        for key, style in (("p50_ms", "o--"), ("p99_ms", "^--")):
            label = f"naive loop {key.removesuffix('_ms')}"
            ax.plot(xs, [r["naive"][key] for r in rows], style, color="grey", alpha=0.8, label=label)
        ax.axvline(naive_max / 2, color="grey", linestyle="-.", label=f"naive: half of max ({naive_max / 2:,.0f}/s)")
    ax.axhline(50, color="grey", linestyle=":", label="goal: p99 < 50 ms")
    ax.axvline(max_rate / 2, color="tab:red", linestyle="--", label=f"Ferry: half of max ({max_rate / 2:,.0f}/s)")
    if sustained:
        label = f"Ferry: half of max sustained ({sustained / 2:,.0f}/s)"
        ax.axvline(sustained / 2, color="tab:green", linestyle="--", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("steady rate (records/s)")
    ax.set_ylabel("record timestamp → endpoint (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small")
    ax.set_title("Latency vs rate, ordering=key, 12 partitions (2 shared cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"plot written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="500,1000,2000,3000")
    ap.add_argument("--half", action="store_true", help="also measure at half of each backlog rate")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--backlog", type=int, default=30_000, help="records of the max-rate run (0: skip)")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--in-flight", type=int, default=32, help="max_in_flight per partition")
    ap.add_argument("--env", action="append", default=[], help="K=V worker environment (repeatable)")
    ap.add_argument("--no-baseline", action="store_true", help="the Ferry worker only, no naive loop")
    ap.add_argument(
        "--naive-consume-timeout-s", type=float, default=0.005, help="the naive loop's consume(500, T) timeout"
    )
    ap.add_argument(
        "--sustained",
        action="store_true",
        help="also find each consumer's maximum sustained rate (the producer running) and measure at half of it",
    )
    ap.add_argument("--probe-seconds", type=float, default=5, help="--sustained: seconds per rate tried")
    ap.add_argument(
        "--linger-ms", type=float, default=5, help="the steady producer's linger.ms (5: librdkafka's, Kafka 4's)"
    )
    ap.add_argument(
        "--endpoint",
        choices=("lean", "aiohttp"),
        default="lean",
        help="the endpoint's server (bench/_endpoint.py): lean takes less of the shared cores",
    )
    ap.add_argument("--plot", type=Path, default=None)
    a = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in a.env)
    rates = [float(r) for r in a.rates.split(",") if r]
    base = not a.no_baseline
    print(f"load average at the start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", flush=True)
    with Stack("ferry-bench-latency-", lean_endpoint=a.endpoint == "lean") as s:
        max_rate = naive_max = 0.0

        def worker(name: str, topic: str) -> ServiceProcess:
            return s.worker(name, [sub(name, [topic], s.ep, max_in_flight=a.in_flight)], env=env)

        def naive_at(tag: str, total: int) -> ServiceProcess:
            return naive(s, f"naive-{tag}", f"lat-naive-{tag}", a.partitions, total, a.naive_consume_timeout_s)

        def worker_at(tag: str, _total: int) -> ServiceProcess:
            return worker(f"lat-{tag}", f"lat-ferry-{tag}")

        if a.backlog:
            produce(s.bootstrap, "backlog", a.partitions, a.backlog, 600, 100)
            if base:
                naive_max, whole = backlog_rate(
                    s,
                    a.backlog,
                    lambda: naive(s, "naive-backlog", "backlog", a.partitions, a.backlog, a.naive_consume_timeout_s),
                )
                print(f"backlog, naive loop: {naive_max:,.0f} records/s ({whole:,.0f} from its start)", flush=True)
            max_rate, whole = backlog_rate(s, a.backlog, lambda: worker("backlog", "backlog"))
            print(f"backlog, Ferry worker: {max_rate:,.0f} records/s ({whole:,.0f} from its start)", flush=True)
            if a.half:
                rates.append(round(max_rate / 2, -1))
                if base:
                    rates.append(round(naive_max / 2, -1))
        p = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": a.linger_ms})
        sus_ferry = sus_naive = 0.0
        if a.sustained:
            if base:
                sus_naive = sustained_rate(
                    s,
                    p,
                    "naive",
                    a.partitions,
                    a.probe_seconds,
                    naive_max or LADDER[-1],
                    lambda topic, total: naive(
                        s, f"naive-{topic}", topic, a.partitions, total, a.naive_consume_timeout_s
                    ),
                )
            sus_ferry = sustained_rate(
                s,
                p,
                "ferry",
                a.partitions,
                a.probe_seconds,
                max_rate or LADDER[-1],
                lambda topic, _total: worker(topic, topic),
            )
            rates += [round(r / 2, -1) for r in (sus_ferry, sus_naive) if r]
        rows: list[dict[str, Any]] = []
        for rate in sorted(set(rates)):
            row: dict[str, Any] = {"rate": rate}
            tag = f"{rate:.0f}"
            if base:
                row["naive"] = run_rate(
                    s,
                    p,
                    f"lat-naive-{tag}",
                    a.partitions,
                    rate,
                    a.seconds,
                    functools.partial(naive_at, tag),
                )
            row["ferry"] = run_rate(
                s,
                p,
                f"lat-ferry-{tag}",
                a.partitions,
                rate,
                a.seconds,
                functools.partial(worker_at, tag),
            )
            rows.append(row)
            line = f"  {rate:6,.0f}/s:"
            for who in ("naive", "ferry") if base else ("ferry",):
                r = row[who]
                line += f"  {who} p50 {r['p50_ms']:.1f} p99 {r['p99_ms']:.1f} ms ({int(r['count']):,}/{r['n']:,})"
            print(line, flush=True)
        del p  # destroyed while the broker still runs (no reconnect noise at exit)
    print()
    print(f"worker settings: {env or 'defaults'}; max_in_flight {a.in_flight}, {a.partitions} partitions, ordering=key")
    if base:
        print(
            f"naive loop: {NAIVE_IN_FLIGHT} in flight, fetch.wait.max.ms 10, fetch.queue.backoff.ms 10, "
            f"consume(500, {a.naive_consume_timeout_s * 1000:.0f} ms)"
        )
    print("max single-record rate (backlog run, first to last receipt):", end=" ")
    if base:
        print(f"naive {naive_max:,.0f} records/s (half: {naive_max / 2:,.0f});", end=" ")
    print(f"Ferry {max_rate:,.0f} records/s (half: {max_rate / 2:,.0f})")
    if a.sustained:
        print("max sustained rate (producer running; rates tried:", ", ".join(map(str, LADDER)) + "):", end=" ")
        if base:
            print(f"naive {sus_naive:,.0f} records/s (half: {sus_naive / 2:,.0f});", end=" ")
        print(f"Ferry {sus_ferry:,.0f} records/s (half: {sus_ferry / 2:,.0f})")
    print(table(rows, base))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores; other processes share them)")
    print(
        "goal: p99 < 50 ms at half of the maximum single-record rate; CPU: ms per 1,000 records delivered; "
        "cores: consumer + broker + endpoint + producer together, of the machine's "
        f"{os.cpu_count()}"
    )
    if a.plot:
        plot(a.plot, rows, max_rate, naive_max, sus_ferry)
    halves = {
        "half the naive loop's backlog maximum": naive_max if a.half else 0.0,
        "half Ferry's backlog maximum": max_rate if a.half else 0.0,
        "half the naive loop's sustained maximum": sus_naive,
        "half Ferry's sustained maximum": sus_ferry,
    }
    _results.save(
        "latency",
        _results.command_line("python3 bench/latency.py", ap, a),
        ["records/s", "naive p50 ms", "naive p99 ms", "Ferry p50 ms", "Ferry p99 ms"],
        [result_row(row, halves, sus_ferry) for row in rows],
        "record timestamp → endpoint receipt; producer, broker, consumer and endpoint share the "
        f"{os.cpu_count()} cores",
    )


def ms(v: float) -> str:
    """A latency cell: tenths of a millisecond, whole milliseconds from 2 s up."""
    return f"{v:,.0f}" if v >= 2000 else f"{v:,.1f}"


def result_row(row: dict[str, Any], halves: dict[str, float], sus_ferry: float) -> list[str]:
    """One row of the saved table: the rate (with the maxima it is half of), naive and Ferry p50/p99;
    Ferry's p99 in bold at half its sustained maximum (the goal's rate)."""
    rate = row["rate"]
    label = f"{rate:,.0f}"
    of = [what for what, top in halves.items() if top and round(top / 2, -1) == rate]
    sustained = [w for w in of if "sustained" in w]
    if len(sustained) == 2:  # both consumers' sustained maxima
        of = [w for w in of if w not in sustained] + ["half the sustained maximum of both"]
    if of:
        label += f" ({'; '.join(of)})"
    n, f = row.get("naive"), row["ferry"]
    cells = [ms(n["p50_ms"]), ms(n["p99_ms"])] if n else ["–", "–"]
    p99 = ms(f["p99_ms"])
    if sus_ferry and round(sus_ferry / 2, -1) == rate:
        p99 = f"**{p99}**"
    return [label, *cells, ms(f["p50_ms"]), p99]


def table(rows: list[dict[str, Any]], base: bool) -> str:
    """Markdown: produced/s and the broker's CPU per consumer run, naive | Ferry."""
    if base:
        cols = ["rate/s", "produced/s naive / Ferry", "delivered naive / Ferry", "naive p50", "naive p99"]
        cols += ["Ferry p50", "Ferry p99", "p99 Ferry/naive", "CPU naive", "CPU Ferry", "broker CPU naive / Ferry"]
        cols += ["endpoint CPU naive / Ferry", "cores naive / Ferry", "produce p99 naive / Ferry"]
        cols += ["after ack p99 naive / Ferry"]
    else:
        cols = ["rate/s", "produced/s", "delivered", "p50 ms", "p95 ms", "p99 ms", "worker CPU", "broker CPU"]
        cols += ["endpoint CPU", "producer CPU", "cores", "produce p99 ms", "after ack p50 ms", "after ack p99 ms"]
    out = ["| " + " | ".join(cols) + " |", "|" + " ---: |" * len(cols)]
    for row in rows:
        f = row["ferry"]
        if base:
            n = row["naive"]
            cells = [
                f"{row['rate']:,.0f}",
                f"{n['achieved']:,.0f} / {f['achieved']:,.0f}",
                f"{int(n['count']):,} / {int(f['count']):,}",
                f"{n['p50_ms']:.1f}",
                f"{n['p99_ms']:.1f}",
                f"{f['p50_ms']:.1f}",
                f"{f['p99_ms']:.1f}",
                f"{f['p99_ms'] / max(n['p99_ms'], 1e-9):.2f}",
                f"{n['consumer_ms']:.0f}",
                f"{f['consumer_ms']:.0f}",
                f"{n['broker_ms']:.0f} / {f['broker_ms']:.0f}",
                f"{n['endpoint_ms']:.0f} / {f['endpoint_ms']:.0f}",
                f"{n['cores']:.2f} / {f['cores']:.2f}",
                f"{n['produce_p99_ms']:.1f} / {f['produce_p99_ms']:.1f}",
                f"{n['after_ack_p99_ms']:.1f} / {f['after_ack_p99_ms']:.1f}",
            ]
        else:
            cells = [
                f"{row['rate']:,.0f}",
                f"{f['achieved']:,.0f}",
                f"{int(f['count']):,}",
                *(f"{f[k]:.1f}" for k in ("p50_ms", "p95_ms", "p99_ms")),
                f"{f['consumer_ms']:.0f}",
                f"{f['broker_ms']:.0f}",
                f"{f['endpoint_ms']:.0f}",
                f"{f['producer_ms']:.0f}",
                f"{f['cores']:.2f}",
                f"{f['produce_p99_ms']:.1f}",
                f"{f['after_ack_p50_ms']:.1f}",
                f"{f['after_ack_p99_ms']:.1f}",
            ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
