"""Where the worker's time goes on the single-record path: py-spy samples, grouped by stage.

Run: python3 bench/worker_profile.py [--records 80000] [--seconds 6] [--native] [--out DIR]

A backlog of 100 B records (12 partitions, ordering=key, 10 in flight per partition) is
delivered to the trivial endpoint while ``py-spy record --gil`` samples the worker process: only
the thread holding the GIL is sampled, so the shares are of the Python CPU time. Each sample is
charged to the stage of the deepest frame that belongs to a known stage (see STAGES), so
"http1 send/parse" includes the socket writes it makes and "partition" only what partition.py
does itself. Over the same window the CPU time of every thread of the worker is read from
/proc/<pid>/task (librdkafka's own threads are named rdk:*). The raw collapsed stacks are kept
in ``--out`` (speedscope/flamegraph tools read them).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import TICK, Stack, sub
from bench.delivery import produce

# (stage, pattern on "function (file:line)"); the first stage matching, from the leaf up, wins.
STAGES: list[tuple[str, re.Pattern[str]]] = [
    ("task creation", re.compile(r"^create_task |Task\.__init__|task_step")),
    ("header building", re.compile(r"^(cloudevent_headers|rfc3339_ms|_header_value) ")),
    ("http1 send/parse", re.compile(r"worker/http1\.py|httptools|^_checkout ")),
    ("offset merge", re.compile(r"worker/offset_merge\.py")),
    ("window", re.compile(r"worker/window\.py")),
    ("metrics", re.compile(r"worker/metrics\.py|prometheus_client")),
    ("offset store / producer", re.compile(r"worker/offset_store\.py|worker/producer\.py")),
    ("fetch/convert (poll thread)", re.compile(r"worker/fetch\.py|confluent_kafka|^_on_batch ")),
    ("push wrapper", re.compile(r"worker/push\.py")),
    ("partition (feed/pump/deliver)", re.compile(r"worker/partition\.py")),
    ("engine", re.compile(r"worker/engine\.py")),
    ("event loop (asyncio/uvloop)", re.compile(r"asyncio/|uvloop|^run_forever|^_run_once")),
]


def stage_of(frames: list[str]) -> str:
    """The stage of the deepest frame with one; the event loop only when no other stage is on the
    stack (asyncio's timeout and semaphore frames under http1 are the client's cost)."""
    for frame in reversed(frames):
        for stage, pattern in STAGES[:-1]:
            if pattern.search(frame):
                return stage
    loop_stage, loop_pattern = STAGES[-1]
    return loop_stage if any(loop_pattern.search(f) for f in frames) else "other"


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds per thread of ``pid``, with the thread's kernel name."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[int(task.name)] = (comm, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def summarize(raw: Path) -> tuple[collections.Counter[str], dict[int, str], int]:
    stages: collections.Counter[str] = collections.Counter()
    threads: dict[int, str] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        total += n
        m = re.match(r"thread \((\d+)\): (.*)", frames[0])
        if m:
            threads[int(m.group(1))] = m.group(2)
        stages[stage_of(frames[1:])] += n
    return stages, threads, total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=80_000)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--rate", type=int, default=200, help="samples per second")
    ap.add_argument("--native", action="store_true", help="also sample C frames (py-spy --native)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--summarize", type=Path, default=None, help="only group an existing collapsed file")
    a = ap.parse_args()
    if a.summarize:
        stages, _, total = summarize(a.summarize)
        for stage, n in stages.most_common():
            print(f"{stage:34} {100 * n / total:5.1f} %")
        return
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        sys.exit("py-spy is not installed: pip install py-spy (or use FERRY_BENCH_PROFILE with bench/delivery.py)")
    out = a.out or Path(tempfile.mkdtemp(prefix="ferry-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "worker.collapsed"
    with Stack("ferry-bench-profile-") as s:
        produce(s.bootstrap, "prof", 12, a.records, 1200, 100)
        s.reset()
        w = s.worker("prof", [sub("prof", ["prof"], s.ep, max_in_flight=10)])
        pid: int = w.proc.pid  # type: ignore[union-attr]
        before, cpu0 = s.stats()["count"], thread_cpu(pid)
        cmd = [pyspy, "record", "--pid", str(pid), "--duration", str(int(a.seconds)), "--gil"]
        cmd += ["--rate", str(a.rate), "--format", "raw", "--output", str(raw), "--threads"]
        if a.native:
            cmd.append("--native")
        subprocess.run(cmd, check=True, capture_output=True, timeout=a.seconds + 60)
        delivered, cpu1 = s.stats()["count"] - before, thread_cpu(pid)
        w.stop()
    stages, names, total = summarize(raw)
    by_thread: collections.defaultdict[str, float] = collections.defaultdict(float)  # CPU seconds per thread
    for tid, (comm, secs) in cpu1.items():
        name = names.get(tid, comm)
        name = "librdkafka (rdk:*)" if name.startswith("rdk:") else name
        by_thread[name] += secs - cpu0.get(tid, (comm, 0.0))[1]
    busy = sum(by_thread.values())
    print(
        f"worker delivered {delivered:,} records while sampled for {a.seconds:.0f} s "
        f"({delivered / a.seconds:,.0f} records/s under the profiler); {total:,} samples"
    )
    print(f"{'stage':34} {'share':>6}")
    for stage, n in stages.most_common():
        print(f"{stage:34} {100 * n / total:5.1f} %")
    print(f"worker CPU over the window: {busy / a.seconds:.2f} cores; by thread:")
    for name, secs in sorted(by_thread.items(), key=lambda kv: kv[1], reverse=True)[:6]:
        print(f"  {name:32} {100 * secs / busy:5.1f} %")
    print(f"collapsed stacks: {raw}")


if __name__ == "__main__":
    main()
