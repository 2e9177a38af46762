"""Transaction state (ferry.txn): folding the log, verbs in each state, back-check schedule."""

from __future__ import annotations

from typing import Any

import pytest

from ferry import txn as t
from ferry.txnlog import TxnId, parse_id

ID = "tx1"


def prepare(ts: int = 1_000, timeout: int = 5_000, records: int = 2) -> dict[str, Any]:
    return {
        "kind": "prepare",
        "id": ID,
        "ts": ts,
        "timeout_ms": timeout,
        "check_url": "http://p/check",
        "records": [{}] * records,
    }


def e(kind: str, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "id": ID, **kw}


# Each case: log entries in order, then the state and checks they mean.
FOLDS: dict[str, tuple[list[dict[str, Any]], str | None, int]] = {
    "prepared": ([prepare()], "prepared", 0),
    "committed through committing": ([prepare(), e("commit"), e("committed", results=[])], "committed", 0),
    "commit decided, records not yet written": ([prepare(), e("commit")], "committing", 0),
    "rolled back": ([prepare(), e("rollback")], "rolled_back", 0),
    "the first decision wins: commit then rollback": ([prepare(), e("commit"), e("rollback")], "committing", 0),
    "the first decision wins: rollback then commit": ([prepare(), e("rollback"), e("commit")], "rolled_back", 0),
    "no 'committed' after a rollback": ([prepare(), e("rollback"), e("committed")], "rolled_back", 0),
    "checks count while prepared": ([prepare(), e("check", ts=6_000), e("check", ts=7_000)], "prepared", 2),
    "checks after the decision are ignored": ([prepare(), e("commit"), e("check", ts=9)], "committing", 0),
    "a repeated prepare is the same transaction": ([prepare(), e("check", ts=6_000), prepare()], "prepared", 1),
    "entries of an unknown transaction change nothing": ([e("commit"), e("check", ts=1)], None, 0),
}


@pytest.mark.parametrize("name", sorted(FOLDS))
def test_fold(name: str) -> None:
    entries, state, checks = FOLDS[name]
    got = t.fold(entries).get(ID)
    assert (got.state if got else None) == state
    assert (got.checks if got else 0) == checks


def test_fold_keeps_transactions_apart() -> None:
    log = [prepare(), {**prepare(), "id": "tx2"}, e("commit"), {"kind": "rollback", "id": "tx2"}]
    txns = t.fold(log)
    assert txns[ID].state == "committing" and txns["tx2"].state == "rolled_back"


def test_unknown_entry_kind_is_an_error_not_a_silent_skip() -> None:
    with pytest.raises(ValueError, match="unknown transaction log entry kind"):
        t.fold([prepare(), e("publish")])


def state_after(*kinds: str) -> t.Txn:
    txn = t.fold([prepare(), *(e(k) for k in kinds)])[ID]
    return txn


@pytest.mark.parametrize(
    ("kinds", "verb", "answer"),
    [
        ((), "commit", "append"),
        ((), "rollback", "append"),
        (("commit",), "commit", "finish"),  # decided, maybe not all written: finish the writes
        (("commit", "committed"), "commit", "same"),
        (("rollback",), "rollback", "same"),
    ],
)
def test_decide(kinds: tuple[str, ...], verb: t.Verb, answer: str) -> None:
    assert t.decide(state_after(*kinds), verb, ID) == answer


@pytest.mark.parametrize(
    ("kinds", "verb"),
    [(("rollback",), "commit"), (("commit",), "rollback"), (("commit", "committed"), "rollback")],
)
def test_the_other_verb_after_a_decision_is_a_conflict(kinds: tuple[str, ...], verb: t.Verb) -> None:
    with pytest.raises(t.Conflict) as err:
        t.decide(state_after(*kinds), verb, ID)
    assert err.value.status == 409 and ID in str(err.value)


def test_unknown_transaction_is_404() -> None:
    with pytest.raises(t.UnknownTransaction) as err:
        t.decide(None, "commit", "nope")
    assert err.value.status == 404


def test_public_view_shows_a_decided_commit_as_committed() -> None:
    assert state_after("commit").public() == {"id": ID, "state": "committed", "checks": 0}
    assert state_after().public()["state"] == "prepared"


def test_check_schedule_timeout_then_doubling_backoff_capped_at_a_minute() -> None:
    txn = t.fold([prepare(ts=1_000, timeout=5_000)])[ID]
    assert t.next_check_ms(txn) == 6_000
    due, log = [], [prepare(ts=1_000, timeout=5_000)]
    now = 6_000
    for _ in range(10):
        log.append(e("check", ts=now))
        txn = t.fold(log)[ID]
        nxt = t.next_check_ms(txn)
        assert nxt is not None
        due.append(nxt - now)
        now = nxt
    assert due == [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000]
    assert t.next_check_ms(state_after("commit")) is None
    assert t.next_check_ms(state_after("rollback")) is None


@pytest.mark.parametrize(
    ("checks", "answer", "entry"),
    [
        (1, "commit", {"kind": "commit", "id": ID, "by": "check"}),
        (1, "rollback", {"kind": "rollback", "id": ID, "reason": "check"}),
        (1, "unknown", None),
        (14, "unknown", None),
        (15, "unknown", {"kind": "rollback", "id": ID, "reason": "max_checks"}),
    ],
)
def test_after_check(checks: int, answer: t.CheckAnswer, entry: dict[str, Any] | None) -> None:
    txn = t.fold([prepare(), *(e("check", ts=10_000 + i) for i in range(checks))])[ID]
    assert t.after_check(txn, answer, max_checks=15) == entry


def test_after_check_on_a_decided_transaction_does_nothing() -> None:
    assert t.after_check(state_after("commit"), "rollback") is None


@pytest.mark.parametrize(
    ("status", "body", "answer"),
    [
        (200, b'{"state": "commit"}', "commit"),
        (200, b'{"state": "rollback"}', "rollback"),
        (204, b'{"state": "unknown"}', "unknown"),
        (200, b'{"state": "COMMIT"}', "unknown"),
        (200, b"commit", "unknown"),
        (200, b"\xff\xfe", "unknown"),
        (200, b"[]", "unknown"),
        (500, b'{"state": "commit"}', "unknown"),
        (302, b'{"state": "commit"}', "unknown"),
    ],
)
def test_parse_check_answer(status: int, body: bytes, answer: str) -> None:
    assert t.parse_check_answer(status, body) == answer


def test_oldest_prepared_age() -> None:
    txns = [t.fold([prepare(ts=1_000)])[ID], state_after("commit")]
    assert t.oldest_prepared_age_s(txns, 11_000) == 10.0
    assert t.oldest_prepared_age_s([state_after("rollback")], 11_000) == 0.0


def test_giving_up_takes_about_eleven_minutes_with_the_defaults() -> None:
    # 1+2+4+8+16+32 s, then 8 checks a minute apart: 543 s from the first check to the 15th.
    assert t.checks_to_give_up(15) == 543


def test_committed_results_are_answered_as_logged() -> None:
    results = [{"partition": 1, "offset": 7}, {"partition": 0, "offset": 3}]
    state = t.fold([prepare(), e("commit"), e("committed", results=results)])[ID]
    assert state.results == results


def test_committed_entries_of_the_old_shape_answer_written_at_an_unknown_position() -> None:
    """A back-check logged ``{"written": true}`` per record before it kept where records went:
    they are in their topics, so each answers as written, its partition and offset unknown."""
    state = t.fold([prepare(), e("commit"), e("committed", results=[{"written": True}] * 2)])[ID]
    assert state.results == [{"partition": None, "offset": None}] * 2
    assert t.committed_results(None) is None


R1, R2, R3 = [{"partition": 0, "offset": 1}], [{"partition": 1, "offset": 5}], [{"partition": 0, "offset": 2}]
SHARED = {"kind": "committed", "id": "tx1", "results": R1, "more": {"tx2": R2, "tx3": R3}, "ts": 9}


@pytest.mark.parametrize(
    ("entry", "expanded"),
    [
        (
            SHARED,
            [
                {"kind": "committed", "id": "tx1", "results": R1, "ts": 9},
                {"kind": "committed", "id": "tx2", "results": R2, "ts": 9},
                {"kind": "committed", "id": "tx3", "results": R3, "ts": 9},
            ],
        ),
        ({"kind": "committed", "id": "tx1", "results": R1}, [{"kind": "committed", "id": "tx1", "results": R1}]),
        ({**SHARED, "more": {}}, [{**SHARED, "more": {}}]),  # nothing more: as it is
        ({**SHARED, "more": "garbage"}, [{**SHARED, "more": "garbage"}]),  # its own part still counts
        ({"kind": "commit", "id": "tx1", "more": {"tx2": R2}}, [{"kind": "commit", "id": "tx1", "more": {"tx2": R2}}]),
    ],
    ids=["shared", "alone", "empty more", "malformed more", "only committed is shared"],
)
def test_expand_a_shared_committed_entry(entry: dict[str, Any], expanded: list[dict[str, Any]]) -> None:
    assert t.expand(entry) == expanded


@pytest.mark.parametrize(
    ("entry", "txn_id", "mine"),
    [
        (SHARED, "tx1", {"kind": "committed", "id": "tx1", "results": R1, "ts": 9}),
        (SHARED, "tx3", {"kind": "committed", "id": "tx3", "results": R3, "ts": 9}),
        (SHARED, "tx4", None),
        ({"kind": "commit", "id": "tx2"}, "tx2", {"kind": "commit", "id": "tx2"}),
        ({"kind": "commit", "id": "tx2"}, "tx1", None),
        ({"kind": "prepare", "ts": 1}, "tx1", {"kind": "prepare", "ts": 1}),  # read back by its position
    ],
)
def test_the_entry_as_it_concerns_one_transaction(entry: dict[str, Any], txn_id: str, mine: Any) -> None:
    assert t.concerning(entry, txn_id) == mine


def test_one_shared_committed_entry_ends_every_transaction_it_names() -> None:
    log = [prepare(), {**prepare(), "id": "tx2"}, {**prepare(), "id": "tx3"}]
    log += [e("commit"), {"kind": "commit", "id": "tx2"}, {"kind": "rollback", "id": "tx3"}, SHARED]
    txns = t.fold(log)
    assert (txns["tx1"].state, txns["tx1"].results) == ("committed", R1)
    assert (txns["tx2"].state, txns["tx2"].results) == ("committed", R2)
    assert txns["tx3"].state == "rolled_back"  # a rolled back one named by mistake stays rolled back


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("0.0.0123456789abcdef", TxnId(0, 0, "0123456789abcdef")),
        ("8.1234.0123456789abcdef", TxnId(8, 1234, "0123456789abcdef")),
        ("00.0.0123456789abcdef", None),  # only the spelling the gateway hands out
        ("0.00.0123456789abcdef", None),
        ("0.01.0123456789abcdef", None),
        ("0.0.0123456789ABCDEF", None),
        ("0.0.0123456789abcdef\n", None),
        (" 0.0.0123456789abcdef", None),
        ("+1.0.0123456789abcdef", None),
        ("0.0.0123456789abcde", None),
        ("1234567.0.0123456789abcdef", None),
        ("nope", None),
    ],
)
def test_transaction_ids_are_read_only_in_their_canonical_form(raw: str, parsed: TxnId | None) -> None:
    assert parse_id(raw) == parsed
    if parsed is not None:
        assert str(parsed) == raw
