"""Shared pieces of the benchmarks: a broker + endpoint stack, static workers, process figures.

``with Stack() as s:`` starts the embedded broker and the trivial endpoint (bench/_endpoint.py;
its lean server with ``Stack(lean_endpoint=True)``) on free ports and stops both on exit;
``s.worker(...)`` starts a static worker (``ferry worker --assignment FILE``) that the stack also
stops on exit, so a benchmark leaves no process behind even when it fails; the log directory is
removed after a run that did not fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench._endpoint import percentile
from ferry.devstack import embedded

BENCH = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


def http(method: str, url: str) -> dict[str, Any]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)  # type: ignore[no-any-return]


def metrics(port: int, timeout_s: float = 10.0) -> dict[str, float]:
    """A Ferry process's ``/metrics`` as {sample, with its labels as written: value}, e.g.
    ``ferry_internal{figure="delay_moved"}`` → 12.0."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as r:
        text = r.read().decode()
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in samples}


def steady_rate(stats: dict[str, Any], n: int) -> float:
    """Records/s as the endpoint saw them, first to last receipt: excludes process start-up (the
    worker's imports, connections and restores), which a whole-run figure would charge to it."""
    assert stats["count"] >= n, stats
    return n / max(1e-6, float(stats["last_at"]) - float(stats["first_at"]))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def machine_cpu_seconds() -> float:
    """CPU seconds spent by the whole machine (all cores, not idle), from /proc/stat."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in parts[:7])
    return (user + nice + system + irq + softirq) / TICK


def pythonpath() -> str:
    """``PYTHONPATH`` for a service a bench starts: the caller's, else this checkout, so the service
    runs the code the bench was started from."""
    return os.environ.get("PYTHONPATH", str(BENCH.parent))


@contextlib.contextmanager
def fresh_broker(work: Path, topic: str, partitions: int) -> Iterator[embedded.ServiceProcess]:
    """A new embedded broker in a folder of its own under ``work``, with ``topic`` made; stopped on
    exit. The embedded broker spends more CPU per request the more it holds, so a run that must not
    meet an earlier run's records gets its own."""
    from ferry import kafka

    broker = embedded.kafka_broker(Path(tempfile.mkdtemp(dir=work)) / "kafka").start().wait_ready(30)
    try:
        kafka.ensure_topic({"bootstrap.servers": f"127.0.0.1:{broker.port}"}, topic, partitions)
        yield broker
    finally:
        broker.stop()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce_even(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int, keys: int = 20) -> None:
    """``per_partition`` records of ``size`` bytes into every partition, ``keys`` keys per partition."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"x" * size
    for i in range(per_partition):
        for part in range(partitions):
            key = f"k{part}-{i % keys}".encode()
            while True:
                try:
                    p.produce(topic, key=key, value=value, partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
    p.flush(120)


@dataclass
class Produced:
    """What :func:`produce_steady` produced."""

    n: int
    seconds: float  # from the first produce() to the end of the flush
    acked_ms: list[float]  # per record: produce() → the broker's acknowledgement
    acked_at: dict[str, float]  # "<partition>/<offset>" → when the broker acknowledged it, ms since the epoch

    def produce_p99_ms(self) -> float:
        return percentile(sorted(self.acked_ms), 0.99)


def produce_steady(p: Producer, topic: str, rate: float, seconds: float) -> Produced:
    """Produce ``rate`` records/s (100-byte values, 600 keys, CreateTime) for ``seconds``, then flush."""
    n = int(rate * seconds)
    value = b"x" * 100
    out = Produced(0, 0.0, [], {})

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            took_ms = msg.latency() * 1000
            out.acked_ms.append(took_ms)
            out.acked_at[f"{msg.partition()}/{msg.offset()}"] = msg.timestamp()[1] + took_ms

    started = time.monotonic()
    i = 0
    # Every millisecond, produce the records that are due: a sleep per record costs more CPU than
    # the producing itself and capped the rate at ~2,000/s on the shared machine.
    while i < n and time.monotonic() - started < seconds + 30:
        due = min(n, int((time.monotonic() - started) * rate) + 1)
        while i < due:
            p.produce(topic, key=f"k{i % 600}".encode(), value=value, on_delivery=acked)
            i += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush(30)
    out.n, out.seconds = i, time.monotonic() - started
    return out


class Stack:
    def __init__(self, prefix: str = "ferry-bench-", lean_endpoint: bool = False) -> None:
        embedded.tie_children()  # the broker, workers and endpoint end with the bench, however it ends
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self._lean = lean_endpoint
        self._procs: list[embedded.ServiceProcess] = []

    def __enter__(self) -> Stack:
        self.broker = embedded.kafka_broker(self.tmp, embedded.free_port())
        self._procs.append(self.broker)
        self.broker.start().wait_ready(30)
        self.bootstrap = f"127.0.0.1:{self.broker.port}"
        port = embedded.free_port()
        argv = [sys.executable, str(BENCH / "_endpoint.py"), str(port), *(["--lean"] if self._lean else [])]
        self.endpoint = embedded.ServiceProcess("endpoint", argv, port, self.tmp / "ep.log")
        self._procs.append(self.endpoint)
        self.endpoint.start().wait_ready(30)
        self.ep = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        for proc in reversed(self._procs):
            proc.stop()
        if e is None:
            shutil.rmtree(self.tmp, ignore_errors=True)  # logs are kept when the run failed

    def reset(self, delay_s: float = 0.0, delay_max_s: float = 0.0) -> None:
        http("POST", f"{self.ep}/reset?delay_s={delay_s}&delay_max_s={delay_max_s}")

    def stats(self) -> dict[str, Any]:
        return http("GET", f"{self.ep}/stats")

    def receipts(self) -> dict[str, float]:
        """When each record pushed one at a time arrived (ms since the epoch), by ``<partition>/<offset>``."""
        return http("GET", f"{self.ep}/receipts")

    def service(self, name: str, argv: list[str], port: int) -> embedded.ServiceProcess:
        """Start a process that listens on ``port`` (an endpoint stand-in) and wait until it does;
        the stack stops it on exit."""
        proc = embedded.ServiceProcess(name, argv, port, self.tmp / f"{name}.log")
        self._procs.append(proc)
        proc.start().wait_ready(30)
        return proc

    def process(self, name: str, argv: list[str]) -> embedded.ServiceProcess:
        """Start a process with no port to wait for (e.g. the naive loop); the stack stops it on exit."""
        proc = embedded.ServiceProcess(name, argv, 0, self.tmp / f"{name}.log")
        self._procs.append(proc)
        return proc.start()

    def worker(
        self,
        name: str,
        subscriptions: list[dict[str, Any]],
        partitions: list[dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
        argv_prefix: list[str] | None = None,
        wait: bool = True,
        origins: dict[str, int] | None = None,
    ) -> embedded.ServiceProcess:
        """Start a static worker; with ``wait``, return once its metrics port listens. ``origins``:
        how many workers push to each adaptive origin, as the coordinator tells its workers."""
        doc: dict[str, Any] = {"subscriptions": subscriptions}
        if partitions is not None:
            doc["partitions"] = partitions
        if origins:
            doc["origins"] = origins
        assignment = self.tmp / f"{name}.json"
        assignment.write_text(json.dumps(doc))
        port = embedded.free_port()
        proc = embedded.ServiceProcess(
            name,
            [sys.executable, *(argv_prefix or []), "-m", "ferry.cli", "worker", "--assignment", str(assignment)],
            port,
            self.tmp / f"{name}.log",
            env={
                "FERRY_KAFKA_BOOTSTRAP": self.bootstrap,
                "FERRY_WORKER_METRICS_PORT": str(port),
                "FERRY_WORKER_ID": name,
                "FERRY_OFFSETS_TOPIC": f"__bench_{name}",
                "FERRY_LOG_LEVEL": "WARNING",
                **(env or {}),
            },
        )
        self._procs.append(proc)
        proc.start()
        if wait:
            proc.wait_ready(60)
        return proc

    def wait_count(self, n: int, timeout_s: float, procs: Sequence[embedded.ServiceProcess] = ()) -> float:
        """Wait until the endpoint counted ``n`` distinct records; returns the seconds waited."""
        started = time.monotonic()
        while self.stats()["count"] < n:
            for p in procs:
                assert p.alive(), p.log_tail()
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"endpoint counted {self.stats()['count']:,} of {n:,} in {timeout_s:.0f} s")
            time.sleep(0.05)
        return time.monotonic() - started


def sub(name: str, topics: list[str], ep: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "topics": topics, "endpoint": {"url": f"{ep}/hook"}, "ordering": "key", **extra}
