"""What a filter costs per record: µs per evaluation of typical filters on a record's attributes,
as the worker evaluates them (the record's attributes computed on demand), one run.

    python3 -m bench.filter [--records 200000]

Rows: an exact match on a header, a prefix on partitionkey, a CESQL expression with three
comparisons and a function call, and the no-filter baseline (building nothing).
"""

from __future__ import annotations

import argparse
import time

from ferry import filters
from ferry.filters.attributes import RecordAttributes

FILTERS = {
    "exact on a header": {"exact": {"region": "eu"}},
    "prefix on partitionkey": {"prefix": {"partitionkey": "customer-1"}},
    "CESQL, 3 comparisons + a function": {
        "sql": "region = 'eu' AND kafkapartition < 6 AND LENGTH(partitionkey) > 3 AND type <> 'x'"
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    n = ap.parse_args().records
    headers = [("region", b"eu"), ("content-type", b"application/json"), ("trace-id", b"abc")]
    records = [(i % 6, i, f"customer-{i % 500}".encode()) for i in range(1000)]
    print(f"bench.filter: {n:,} evaluations each, on this machine\n")
    print(f"{'filter':36} {'µs/record':>10} {'passed':>8}")
    for name, doc in FILTERS.items():
        f = filters.parse(doc)
        passed = 0
        started = time.perf_counter()
        for i in range(n):
            p, o, key = records[i % 1000]
            ok, _ = f.matches(RecordAttributes("orders", p, o, key, headers, 1_795_552_317_864, "default", "s"))
            passed += ok
        us = (time.perf_counter() - started) / n * 1e6
        print(f"{name:36} {us:>10.2f} {passed:>8,}")


if __name__ == "__main__":
    main()
