"""How `ferry subscriptions status` prints a subscription's adaptive concurrency."""

from __future__ import annotations

from ferry.client.output import concurrency_table

CONC = {"mode": "adaptive", "min": 1, "max": 32, "origin": "http://svc:8080"}


def test_each_worker_pushing_there_is_a_row() -> None:
    workers = {
        "worker-2": {
            "limit": 7,
            "probing": False,
            "in_flight": 3,
            "waiting": 0,
            "no_queue_latency_ms": 20.5,
            "overloads": 0,
        },
        "worker-1": {
            "limit": 1,
            "probing": True,
            "in_flight": 1,
            "waiting": 9,
            "no_queue_latency_ms": None,
            "overloads": 2,
        },
    }
    assert concurrency_table({**CONC, "workers": workers}).splitlines() == [
        "concurrency: adaptive 1-32 toward http://svc:8080",
        "WORKER    LIMIT  PROBING  IN_FLIGHT  WAITING  NO_QUEUE_LATENCY_MS  OVERLOADS",
        "worker-1  1      True     1          9        -                    2",
        "worker-2  7      False    3          0        20.5                 0",
    ]


def test_no_worker_pushing_there_yet_says_so() -> None:
    assert concurrency_table({**CONC, "workers": {}}) == (
        "concurrency: adaptive 1-32 toward http://svc:8080 (no worker pushes there yet)"
    )
