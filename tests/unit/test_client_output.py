"""What the client commands print and parse: the adaptive limits below a status, and
`ferry produce`'s `--delay` and `--header`."""

from __future__ import annotations

import pytest

from ferry.client.commands import _name_refused, duration_ms, headers_of
from ferry.client.output import concurrency_table
from ferry.errors import ValidationError

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
            "sharing": 2,
        },
        "worker-1": {
            "limit": 1,
            "probing": True,
            "in_flight": 1,
            "waiting": 9,
            "no_queue_latency_ms": None,
            "overloads": 2,
            "sharing": 2,
        },
    }
    assert concurrency_table({**CONC, "workers": workers}).splitlines() == [
        "concurrency: adaptive 1-32 toward http://svc:8080",
        "WORKER    LIMIT  PROBING  IN_FLIGHT  WAITING  NO_QUEUE_LATENCY_MS  OVERLOADS  SHARING",
        "worker-1  1      True     1          9        -                    2          2",
        "worker-2  7      False    3          0        20.5                 0          2",
    ]


def test_no_worker_pushing_there_yet_says_so() -> None:
    assert concurrency_table({**CONC, "workers": {}}) == (
        "concurrency: adaptive 1-32 toward http://svc:8080 (no worker pushes there yet)"
    )


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("1.5s", 1_500),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("250", 250),
        (" 10S ", 10_000),
        ("0.1ms", 1),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["soon", "", "0s", "-5s", "5w", "inf", "nan", "1e400s", "s"])
def test_a_bad_duration_says_what_to_give(text: str) -> None:
    with pytest.raises(ValidationError, match=r"give e\.g\. 500ms, 30s"):
        duration_ms(text)


def test_headers_are_name_equals_value() -> None:
    assert headers_of(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValidationError, match="not NAME=VALUE"):
        headers_of(["=v"])


def test_refused_answers_are_named_where_they_are_first_ten(capsys: pytest.CaptureFixture[str]) -> None:
    answers = [{"partition": 0, "offset": 1}] + [{"error": f"bad {i}"} for i in range(1, 13)]
    _name_refused([(f"records[{i}]", r) for i, r in enumerate(answers)])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "records[1]: bad 1" and lines[9] == "records[10]: bad 10"
    assert lines[10:] == ["... and 2 more (every answer: -o json)"]
