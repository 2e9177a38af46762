"""Throughput vs in-flight window: the Ferry worker (ordering=key) at max_in_flight per partition
1, 2, 5, 10, 20, 50 over 12 partitions, and the naive loop at the matching total in flight.

Run: python3 bench/window_sweep.py [--records 20000] [--windows 1,2,5,10,20,50] [--repeat 1]
     [--plot docs/bench/window_sweep.png]

The same records (100 B, 1,200 keys so that key ordering does not cap a window of 50) are
delivered to the same trivial endpoint once per window and once per naive in-flight count.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import naive_loop
from bench._harness import Stack, sub
from bench.delivery import produce


def plot(path: Path, windows: list[int], ferry: list[float], naive: list[float], partitions: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    ax.plot(windows, ferry, "o-", label="Ferry worker, ordering=key")
    ax.plot(windows, naive, "s--", label=f"naive loop, {partitions} × window in flight")
    ax.set_xscale("log")
    ax.set_xticks(windows, [str(w) for w in windows])
    ax.set_xlabel(f"max_in_flight per partition ({partitions} partitions)")
    ax.set_ylabel("records/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Delivered records/s vs in-flight window (2 shared cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"plot written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keys", type=int, default=1_200)
    ap.add_argument("--windows", default="1,2,5,10,20,50")
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the best is kept (shared machines)")
    ap.add_argument("--plot", type=Path, default=None, help="write a PNG (e.g. docs/bench/window_sweep.png)")
    a = ap.parse_args()
    windows = [int(w) for w in a.windows.split(",")]
    ferry: list[float] = []
    naive: list[float] = []
    with Stack("ferry-bench-window-") as s:
        print(f"producing {a.records:,} records ({a.keys} keys, {a.partitions} partitions, 100 B)...", flush=True)
        produce(s.bootstrap, "sweep", a.partitions, a.records, a.keys, 100)
        for w in windows:
            best_naive = best_ferry = 0.0
            for r in range(a.repeat):
                s.reset()
                in_flight = w * a.partitions
                secs = asyncio.run(
                    naive_loop.run(s.bootstrap, "sweep", a.partitions, f"{s.ep}/hook", a.records, in_flight)
                )
                best_naive = max(best_naive, a.records / secs)
                s.reset()
                name = f"sweep-w{w}-{r}"
                worker = s.worker(name, [sub(name, ["sweep"], s.ep, max_in_flight=w)])
                secs = s.wait_count(a.records, 600, [worker])
                worker.stop()
                best_ferry = max(best_ferry, a.records / secs)
            naive.append(best_naive)
            ferry.append(best_ferry)
            print(f"  window {w:>3}: naive {naive[-1]:8,.0f}  ferry {ferry[-1]:8,.0f} records/s", flush=True)
    print()
    print(f"{'window/partition':>16} {'total in flight':>15} {'naive rec/s':>11} {'ferry rec/s':>11} {'ratio':>6}")
    for w, f, n in zip(windows, ferry, naive, strict=True):
        print(f"{w:>16} {w * a.partitions:>15} {n:>11,.0f} {f:>11,.0f} {f / n:>5.2f}x")
    print(
        f"{a.records:,} records of 100 B, {a.keys} keys, {a.partitions} partitions; "
        f"ferry time counted from the worker being up (includes its start-up); best of {a.repeat}"
    )
    if a.plot:
        plot(a.plot, windows, ferry, naive, a.partitions)


if __name__ == "__main__":
    main()
