"""The delay store, one run: how late scheduled records reach their topic, what it costs, how many
records per second one worker takes in, and its memory while a million records wait — beside a
naive baseline on the same records.

    python3 -m bench.delay [--records 100000] [--spread-s 60] [--rate 2000] [--waiting 1000000]

Starts ZooKeeper, the broker, a coordinator and one worker (internal work on). Three phases:

1. ``--waiting`` records due in two hours are produced to ``FERRY_DELAY_TOPIC`` as fast as the
   producer goes; the worker takes them in (each written to its level topic): printed, the records
   per second it took in and its RSS once all of them wait.
2. ``--records`` records with delays drawn uniformly from 0–``spread-s`` seconds are scheduled at
   ``--rate``; the target topic is read until every record is there. Printed: lateness (the
   delivered record's timestamp − its due time) p50 / p99 / max, how many were early (must be 0),
   level writes per record, the worker's CPU per 1,000 records.
3. The naive baseline (bench/_naive_delay.py: one consumer that sleeps until each record is due)
   on the same delays at the same rate, in its own process; the same figures.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Message

from bench import _results
from bench._harness import cpu_seconds, metrics, pythonpath, rss_mb
from ferry import delay, kafka
from ferry.devstack import embedded

DELAY_TOPIC = "__ferry_delay"
BANDS = ((100, "0-0.1 s"), (1_000, "0.1-1 s"), (10_000, "1-10 s"), (float("inf"), "10 s and more"))


def schedule(bootstrap: str, topic: str, target: str, delays_ms: list[int], rate: float | None) -> dict[bytes, int]:
    """Produce one record per delay (at ``rate`` per second, or as fast as possible); value → due."""
    p = kafka.producer({"bootstrap.servers": bootstrap, "linger.ms": 5}, "bench")
    due: dict[bytes, int] = {}
    started = time.monotonic()
    for i, delay_ms in enumerate(delays_ms):
        d = int(time.time() * 1000) + delay_ms
        value = str(i).encode()
        due[value] = d
        headers: list[tuple[str, str | bytes | None]] = [
            (delay.DELIVER_AT_HEADER, str(d).encode()),
            (delay.TARGET_TOPIC_HEADER, target.encode()),
        ]
        while True:
            try:
                p.produce(topic, value=value, key=value, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if rate is not None:
            time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    assert p.flush(60) == 0
    return due


_reader = ThreadPoolExecutor(1, thread_name_prefix="arrivals")


def arrivals(bootstrap: str, target: str, want: int, deadline_s: float) -> dict[bytes, int]:
    """Read the target topic as records arrive until ``want`` are there: value → its timestamp.
    Runs beside the scheduling, as a consumer of the target would: reading what arrived in one
    burst once scheduling ends loads the broker and the machine just while records are still due.
    Each read goes on from where the last one ended (reading it all again every second would be
    most of the broker's work)."""
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + deadline_s
    ends: dict[int, int] | None = None

    def take(m: Message) -> None:
        got.setdefault(m.value() or b"", m.timestamp()[1])

    while len(got) < want and time.monotonic() < deadline:
        ends = kafka.read_to_end({"bootstrap.servers": bootstrap}, target, take, start=ends)
        time.sleep(1)
    return got


def moved(metrics_port: int) -> int:
    """Records the worker's delay store wrote to a level topic so far (its /metrics)."""
    return int(metrics(metrics_port).get('ferry_internal{figure="delay_moved"}', 0))


def lateness_row(name: str, due: dict[bytes, int], got: dict[bytes, int], extra: str) -> list[str]:
    """Print one line of lateness figures; the cells for the result table."""
    late = sorted(got[v] - due[v] for v in got)

    def pct(q: float) -> int:
        return late[min(len(late) - 1, int(q * len(late)))] if late else 0

    early = sum(1 for x in late if x < 0)
    print(
        f"{name:<8} delivered {len(got):>7,} of {len(due):,}; early {early}; lateness ms p50 {pct(0.5):,} "
        f"p99 {pct(0.99):,} max {late[-1] if late else 0:,}; {extra}"
    )
    return [
        name,
        f"{len(got):,} of {len(due):,}",
        str(early),
        f"{pct(0.5):,}",
        f"{pct(0.99):,}",
        f"{late[-1] if late else 0:,}",
    ]


def by_delay(delays: list[int], due: dict[bytes, int], got: dict[bytes, int]) -> None:
    """Where the lateness comes from: p50/p99/max per delay range, per level writes and per 20 s of
    due times (printed only, to read beside the table)."""
    groups: dict[str, list[int]] = {}
    for i, delay_ms in enumerate(delays):
        value = str(i).encode()
        if value not in got:
            continue
        late = got[value] - due[value]
        band = next(name for bound, name in BANDS if delay_ms < bound)
        for key in (f"delay {band}", f"{delay.level_writes(delay_ms)} level writes"):
            groups.setdefault(key, []).append(late)
    first = min(due.values())
    for i in range(len(delays)):
        if (value := str(i).encode()) in got:
            at_s = int((due[value] - first) / 20_000) * 20
            groups.setdefault(f"due at {at_s:>3}-{at_s + 20} s", []).append(got[value] - due[value])
    late_of = {i: got[v] - due[v] for i in range(len(delays)) if (v := str(i).encode()) in got}
    for i in sorted(late_of, key=late_of.__getitem__, reverse=True)[:5]:
        due_s = (due[str(i).encode()] - first) / 1000
        print(f"  late {late_of[i]:,} ms: due {due_s:.1f} s into the run, delay {delays[i]:,} ms")
    for key in sorted(groups):
        lates = sorted(groups[key])
        p99 = lates[min(len(lates) - 1, int(0.99 * len(lates)))]
        p50 = lates[len(lates) // 2]
        print(f"  {key:<22} {len(lates):>7,} records: late p50 {p50:,} p99 {p99:,} max {lates[-1]:,} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--spread-s", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=2_000.0, help="records scheduled per second")
    ap.add_argument("--waiting", type=int, default=1_000_000, help="records left waiting (two hours) first")
    ap.add_argument("--no-baseline", action="store_true")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-delay-"))
    zk = embedded.zookeeper(work / "zk").start().wait_ready(60)
    broker = embedded.kafka_broker(work / "kafka").start().wait_ready(30)
    bootstrap, zk_connect = f"127.0.0.1:{broker.port}", f"127.0.0.1:{zk.port}"
    metrics_port = embedded.free_port()
    env = {
        "PYTHONPATH": pythonpath(),
        "FERRY_ZK_CONNECT": zk_connect,
        "FERRY_KAFKA_BOOTSTRAP": bootstrap,
        "FERRY_DB_URL": f"sqlite:///{work}/meta.db",
        "FERRY_COORDINATOR_METRICS_PORT": "0",
        "FERRY_WORKER_METRICS_PORT": str(metrics_port),
        "FERRY_TOPIC_POLL_MS": "1000",
        "FERRY_LOG_LEVEL": "WARNING",
    }
    procs = [zk, broker]
    rng = random.Random(7)
    try:
        from ferry.migrations import runner

        runner.upgrade(env["FERRY_DB_URL"])
        coord = embedded.python_module("coordinator", ["coordinator"], work / "coord.log", env).start()
        worker = embedded.python_module("worker", ["worker"], work / "worker.log", env).start()
        procs += [coord, worker]
        for target in ("bench.delayed", "bench.naive", "bench.waiting"):
            kafka.ensure_topic({"bootstrap.servers": bootstrap}, target, 4)
        time.sleep(8)  # the coordinator creates the delay topics and plans them; the worker restores
        assert worker.proc is not None
        print(
            f"\nbench.delay: one worker; {a.waiting:,} waiting, then {a.records:,} records, delays 0–{a.spread_s:g} s"
        )

        if a.waiting:
            t0 = time.monotonic()
            base = moved(metrics_port)
            schedule(bootstrap, DELAY_TOPIC, "bench.waiting", [2 * 3_600_000] * a.waiting, None)
            produced_s = time.monotonic() - t0
            while moved(metrics_port) - base < a.waiting and time.monotonic() - t0 < 900:
                time.sleep(1)
            took_s = time.monotonic() - t0
            _results.save(
                "delay_intake",
                f"python3 -m bench.delay --waiting {a.waiting}",
                ["records scheduled two hours ahead", "taken in by one worker", "records/s", "worker RSS after"],
                [
                    [
                        f"{a.waiting:,}",
                        f"{took_s:.1f} s",
                        f"{a.waiting / took_s:,.0f}",
                        f"{rss_mb(worker.proc.pid):.0f} MB",
                    ]
                ],
                "produced as fast as one producer goes; each is written to its level topic",
            )
            print(
                f"waiting  {moved(metrics_port) - base:,} of {a.waiting:,} taken in by the worker in {took_s:.1f} s "
                f"({a.waiting / took_s:,.0f}/s; produced in {produced_s:.1f} s); "
                f"worker RSS {rss_mb(worker.proc.pid):.0f} MB"
            )

        delays = [rng.randrange(0, int(a.spread_s * 1000) + 1) for _ in range(a.records)]
        cpu0 = cpu_seconds(worker.proc.pid)
        levels0 = sum(_count(bootstrap, t) for t, _, _ in delay.level_topics(DELAY_TOPIC))
        reading = _reader.submit(arrivals, bootstrap, "bench.delayed", a.records, a.records / a.rate + a.spread_s + 180)
        due = schedule(bootstrap, DELAY_TOPIC, "bench.delayed", delays, a.rate)
        got = reading.result()
        cpu = cpu_seconds(worker.proc.pid) - cpu0
        levels = sum(_count(bootstrap, t) for t, _, _ in delay.level_topics(DELAY_TOPIC)) - levels0
        ferry_cpu = 1000 * cpu / max(1, len(got)) * 1000
        by_delay(delays, due, got)
        table = [
            [
                *lateness_row("Ferry", due, got, f"RSS {rss_mb(worker.proc.pid):.0f} MB"),
                f"{levels / max(1, a.records):.2f}",
                f"{ferry_cpu:.0f}",
            ]
        ]
        if not a.no_baseline:
            kafka.ensure_topic({"bootstrap.servers": bootstrap}, "bench.naive.in", 1)
            naive = subprocess.Popen(
                [sys.executable, "-m", "bench._naive_delay", bootstrap, "bench.naive.in", str(a.records)],
                env={**os.environ, **env},
            )
            try:
                reading = _reader.submit(
                    arrivals, bootstrap, "bench.naive", a.records, a.records / a.rate + a.spread_s + 180
                )
                due = schedule(bootstrap, "bench.naive.in", "bench.naive", delays, a.rate)
                got = reading.result()
            finally:
                _, _, usage = os.wait4(naive.pid, 0)
            naive_cpu = 1000 * (usage.ru_utime + usage.ru_stime) / max(1, len(got)) * 1000
            table.append(
                [*lateness_row("naive", due, got, f"CPU per 1,000 records {naive_cpu:.0f} ms"), "0", f"{naive_cpu:.0f}"]
            )
        _results.save(
            "delay",
            f"python3 -m bench.delay --records {a.records} --spread-s {a.spread_s:g} --rate {a.rate:g} "
            f"--waiting {a.waiting}",
            [
                "",
                "delivered",
                "early",
                "late p50 ms",
                "late p99 ms",
                "late max ms",
                "level writes per record",
                "CPU ms per 1,000 records",
            ],
            table,
            f"delays drawn from 0–{a.spread_s:g} s, scheduled at {a.rate:,.0f}/s while {a.waiting:,} records wait; "
            "the naive baseline is one consumer sleeping until each record is due",
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)
        sys.stdout.flush()


def _count(bootstrap: str, topic: str) -> int:
    n = [0]

    def one(_m: object) -> None:
        n[0] += 1

    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, one)
    return n[0]


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
