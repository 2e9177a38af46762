"""The delay store, one run: how late scheduled records reach their topic, and what it costs.

    python3 -m bench.delay [--records 20000] [--spread-s 20] [--rate 2000]

Starts ZooKeeper, the broker, a coordinator and one worker (internal work on), schedules records
with delays spread evenly over 0–``spread-s`` seconds by producing them to ``FERRY_DELAY_TOPIC``
with ``ferry-deliver-at`` / ``ferry-target-topic`` at a steady rate, and reads the target topic
until every record is there. Printed: lateness (the delivered record's timestamp − its due time)
p50 / p99 / max, how many were early (must be 0), level writes per record (records written to the
level topics ÷ records), the worker's CPU per 1,000 records and its RSS at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench._harness import cpu_seconds, rss_mb
from ferry import delay, kafka
from ferry.devstack import embedded


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--spread-s", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=2_000.0, help="records scheduled per second")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-delay-"))
    zk = embedded.zookeeper(work / "zk").start().wait_ready(60)
    broker = embedded.kafka_broker(work / "kafka").start().wait_ready(30)
    bootstrap, zk_connect = f"127.0.0.1:{broker.port}", f"127.0.0.1:{zk.port}"
    env = {
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(Path(__file__).resolve().parents[1])),
        "FERRY_ZK_CONNECT": zk_connect,
        "FERRY_KAFKA_BOOTSTRAP": bootstrap,
        "FERRY_DB_URL": f"sqlite:///{work}/meta.db",
        "FERRY_COORDINATOR_METRICS_PORT": "0",
        "FERRY_WORKER_METRICS_PORT": "0",
        "FERRY_TOPIC_POLL_MS": "1000",
        "FERRY_LOG_LEVEL": "WARNING",
    }
    procs = [zk, broker]
    try:
        from ferry.migrations import runner

        runner.upgrade(env["FERRY_DB_URL"])
        coord = embedded.python_module("coordinator", ["coordinator"], work / "coord.log", env).start()
        worker = embedded.python_module("worker", ["worker"], work / "worker.log", env).start()
        procs += [coord, worker]
        target = "bench.delayed"
        kafka.ensure_topic({"bootstrap.servers": bootstrap}, target, 4)
        time.sleep(8)  # the coordinator creates the delay topics and plans them; the worker restores
        assert worker.proc is not None
        cpu0 = cpu_seconds(worker.proc.pid)
        p = kafka.producer({"bootstrap.servers": bootstrap, "linger.ms": 5}, "bench")
        due: dict[bytes, int] = {}
        started = time.monotonic()
        for i in range(a.records):
            now_ms = int(time.time() * 1000)
            d = now_ms + int(a.spread_s * 1000 * i / a.records)
            value = str(i).encode()
            due[value] = d
            headers = [(delay.DELIVER_AT_HEADER, str(d).encode()), (delay.TARGET_TOPIC_HEADER, target.encode())]
            while True:
                try:
                    p.produce("__ferry_delay", value=value, key=value, headers=headers)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
            time.sleep(max(0.0, started + (i + 1) / a.rate - time.monotonic()))
        assert p.flush(30) == 0
        got: dict[bytes, int] = {}
        deadline = time.monotonic() + a.spread_s + a.records / a.rate + 120
        while len(got) < a.records and time.monotonic() < deadline:
            got.clear()
            kafka.read_to_end(
                {"bootstrap.servers": bootstrap},
                target,
                lambda m: got.setdefault(m.value(), m.timestamp()[1]),
            )
            time.sleep(1)
        cpu = cpu_seconds(worker.proc.pid) - cpu0
        rss = rss_mb(worker.proc.pid)
        late = sorted(got[v] - due[v] for v in got)
        levels = 0
        for topic, _, _ in delay.level_topics("__ferry_delay"):
            counter: list[int] = []
            kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, lambda m, c=counter: c.append(1))
            levels += len(counter)

        def pct(q: float) -> int:
            return late[min(len(late) - 1, int(q * len(late)))] if late else 0

        print(
            f"\nbench.delay: {a.records:,} records, delays 0–{a.spread_s:g} s, scheduled at {a.rate:,.0f}/s, one worker"
        )
        print(f"delivered {len(got):,} of {a.records:,}; early {sum(1 for x in late if x < 0)}")
        print(f"lateness ms: p50 {pct(0.5)}  p99 {pct(0.99)}  max {late[-1] if late else 0}")
        print(f"level writes per record: {levels / max(1, a.records):.2f}")
        print(f"worker CPU per 1,000 records: {1000 * cpu / max(1, len(got)) * 1000:.0f} ms; RSS {rss:.0f} MB")
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
