"""The back-check runner in virtual time: a scripted producer (its check answers, its own commit or
rollback through the gateway) → when checks happen, what is logged, what is written, and when the
prepare entry may be committed. Minutes of back-off run in milliseconds (tests/support/vtime.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from ferry import txn
from ferry.worker.txn_checks import CheckRunner, Counters
from tests.support.vtime import run

ID = "3.17.00000000000000aa"
RECORDS = [{"topic": "orders", "key": "a", "value_b64": "MQ=="}, {"topic": "billing", "key": "b", "value_b64": "Mg=="}]


@dataclass
class World:
    """The log partition, the producer and the target topics, all in memory."""

    answers: list[Any]  # what the producer's check endpoint says, in order ("commit", ..., or an exception)
    log: list[dict[str, Any]] = field(default_factory=list)
    asked_at: list[float] = field(default_factory=list)
    written: list[tuple[float, str, int]] = field(default_factory=list)
    runner: CheckRunner | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def append(self, txn_id: str, entry: dict[str, Any]) -> None:
        self.feed({**entry, "id": txn_id, "ts": int(self.now() * 1000)})

    lag_s: float = 0.0  # how far behind the log the owner reads it
    ask_s: float = 0.0  # how long the producer takes to answer a check

    def feed(self, entry: dict[str, Any]) -> asyncio.Task[None]:
        """An entry reaches the log: the owner's window hands it to the runner (ordering none),
        ``lag_s`` later (in log order)."""
        self.log.append(entry)
        assert self.runner is not None
        runner = self.runner

        async def reach() -> None:
            if self.lag_s:
                await asyncio.sleep(self.lag_s)
            await runner.handle(entry)

        task = asyncio.get_running_loop().create_task(reach())
        self.tasks.append(task)
        return task

    async def ask(self, url: str, body: dict[str, Any]) -> txn.CheckAnswer:
        assert url == "http://producer/check" and body["id"] == ID
        self.asked_at.append(self.now())
        if self.ask_s:
            await asyncio.sleep(self.ask_s)
        answer = self.answers.pop(0) if self.answers else "unknown"
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    async def write(self, txn_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for seq, _ in enumerate(records):
            self.written.append((self.now(), txn_id, seq))
        return [{"partition": 0, "offset": i} for i in range(len(records))]

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.log]


def scenario(  # type: ignore[no-untyped-def]
    answers: list[Any],
    producer: list[tuple[float, str]] = (),
    timeout_ms: int = 5_000,
    lag_s: float = 0.0,
    ask_s: float = 0.0,
    shared_at: tuple[float, dict[str, Any]] | None = None,
    **kw: Any,
):
    """Prepare at t=0; the producer's own verbs at the given times (and, at ``shared_at``, an entry
    as it is in the log); run until the prepare is done."""

    async def main() -> tuple[World, float]:
        world = World(list(answers), lag_s=lag_s, ask_s=ask_s)
        world.runner = CheckRunner(
            world,
            world.ask,
            world.write,
            now_ms=lambda: int(world.now() * 1000),
            **kw,
        )
        prepare = world.feed(
            {"kind": "prepare", "id": ID, "ts": 0, "timeout_ms": timeout_ms, "check_url": "http://producer/check"}
            | {"records": RECORDS}
        )
        for at, kind in producer:
            await asyncio.sleep(at - world.now())
            world.feed({"kind": kind, "id": ID, "ts": int(world.now() * 1000)})
        if shared_at is not None:
            await asyncio.sleep(shared_at[0] - world.now())
            world.feed({**shared_at[1], "ts": int(world.now() * 1000)})
        await asyncio.wait_for(prepare, timeout=24 * 3600)
        done_at = world.now()
        await asyncio.gather(*world.tasks)
        return world, done_at

    return run(main())


def test_producer_commits_in_time_no_check() -> None:
    world, done = scenario([], producer=[(1.0, "commit"), (1.2, "committed")])
    assert world.asked_at == [] and world.written == []  # the gateway wrote them
    assert world.kinds() == ["prepare", "commit", "committed"]
    assert done == pytest.approx(1.2)
    assert world.runner is not None and world.runner.counters == Counters(committed=1)  # counted, not checked


def test_producer_rolls_back_in_time() -> None:
    world, done = scenario([], producer=[(0.5, "rollback")])
    assert world.asked_at == [] and world.written == [] and done == pytest.approx(0.5)
    assert world.runner is not None and world.runner.counters == Counters(rolled_back=1)


def test_check_at_timeout_answers_commit() -> None:
    world, done = scenario(["commit"])
    assert done == pytest.approx(5.0)
    assert world.asked_at == [pytest.approx(5.0)]
    assert world.kinds() == ["prepare", "check", "commit", "committed"]
    assert [(t, seq) for t, _, seq in world.written] == [(pytest.approx(5.0), 0), (pytest.approx(5.0), 1)]
    assert world.runner is not None and world.runner.counters == Counters(checks=1, committed=1)
    assert world.runner.open == {}


def test_check_answers_rollback_nothing_written() -> None:
    world, _ = scenario(["rollback"])
    assert world.kinds() == ["prepare", "check", "rollback"] and world.log[-1]["reason"] == "check"
    assert world.written == []
    assert world.runner is not None and world.runner.counters == Counters(checks=1, rolled_back=1)


def test_unknown_backs_off_then_commit() -> None:
    world, done = scenario(["unknown", "unknown", "commit"])
    assert world.asked_at == [pytest.approx(5.0), pytest.approx(6.0), pytest.approx(8.0)]
    assert world.kinds().count("check") == 3 and world.kinds()[-1] == "committed"
    assert len(world.written) == 2 and done == pytest.approx(8.0)


def test_errors_and_garbage_count_as_unknown() -> None:
    world, _ = scenario([OSError("refused"), "unknown", "rollback"])
    assert len(world.asked_at) == 3 and world.kinds()[-1] == "rollback"
    assert world.runner is not None and world.runner.counters.check_failures == 2


def test_max_checks_then_rollback_with_the_documented_schedule() -> None:
    world, done = scenario([], max_checks=txn.DEFAULT_MAX_CHECKS)
    gaps = [b - a for a, b in zip(world.asked_at, world.asked_at[1:], strict=False)]
    assert len(world.asked_at) == 15
    assert gaps == [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60, 60, 60]
    assert world.log[-1] == {**world.log[-1], "kind": "rollback", "reason": "max_checks"}
    assert done - 5.0 == pytest.approx(txn.checks_to_give_up())
    assert world.written == []


def test_producer_rolls_back_between_checks() -> None:
    world, done = scenario(["unknown"], producer=[(5.5, "rollback")])
    assert world.asked_at == [pytest.approx(5.0)] and done == pytest.approx(5.5)
    assert world.kinds() == ["prepare", "check", "rollback"]


def test_a_commit_whose_writer_died_is_finished_after_the_grace() -> None:
    # The gateway logged the decision and died before logging "committed".
    world, done = scenario([], producer=[(1.0, "commit")], grace_ms=30_000)
    assert world.asked_at == []
    assert [t for t, _, _ in world.written] == [pytest.approx(31.0)] * 2
    assert world.kinds() == ["prepare", "commit", "committed"] and done == pytest.approx(31.0)
    assert world.runner is not None and world.runner.counters == Counters(committed=1, finished_after_crash=1)


def test_a_committed_entry_shared_with_other_transactions_ends_the_commit() -> None:
    # The gateway logged the decision, wrote the records, and logged `committed` in one entry with
    # other transactions' (the first one named is another's): nothing is left to finish.
    shared = {"kind": "committed", "id": "3.16.00000000000000bb", "results": [], "more": {ID: [{"partition": 0}] * 2}}
    world, done = scenario([], producer=[(1.0, "commit")], grace_ms=30_000, shared_at=(1.2, shared))
    assert world.asked_at == [] and world.written == [] and done == pytest.approx(1.2)
    assert world.runner is not None and world.runner.counters == Counters(committed=1)


def test_a_late_rollback_after_commit_changes_nothing() -> None:
    world, _ = scenario([], producer=[(1.0, "commit"), (1.1, "rollback"), (1.2, "committed")])
    assert world.written == [] and world.runner is not None and world.runner.open == {}
    assert world.runner.counters == Counters(committed=1)


def test_the_echo_of_its_own_check_is_not_a_second_check() -> None:
    world, _ = scenario(["unknown", "unknown", "unknown", "rollback"])
    checks = [e for e in world.log if e["kind"] == "check"]
    assert len(checks) == 4 and len({e["eid"] for e in checks}) == 4
    # The schedule doubles per check made, not per check seen twice: 1, 2, 4 s.
    assert [b - a for a, b in zip(world.asked_at, world.asked_at[1:], strict=False)] == [1, 2, 4]


@pytest.mark.parametrize(
    ("name", "producer", "written_by_runner", "final"),
    [
        # The producer commits through a gateway at 5.2 s (which writes and logs committed at 5.3 s),
        # while the owner, 2 s behind the log, asks the check at 5 s and hears commit at 5.5 s.
        ("the producer's commit came first", [(5.2, "commit"), (5.3, "committed")], 0, "committed"),
        # The producer rolls back at 5.2 s; the check answers commit at 5.5 s: rolled back stands.
        ("the producer's rollback came first", [(5.2, "rollback")], 0, "rolled_back"),
        # Nobody else decided: the check's commit stands and the owner writes the records.
        ("the check's commit is the first decision", [], 2, "committed"),
    ],
)
def test_a_check_decision_stands_only_if_it_is_first_in_the_log(
    name: str, producer: list[tuple[float, str]], written_by_runner: int, final: str
) -> None:
    world, _ = scenario(["commit"], producer, lag_s=2.0, ask_s=0.5)
    assert len(world.written) == written_by_runner, name
    states = txn.fold([{**e, "id": ID} for e in world.log])
    assert states[ID].state == final, name
    assert world.runner is not None, name
    counted = world.runner.counters.committed, world.runner.counters.rolled_back
    assert counted == ((1, 0) if final == "committed" else (0, 1)), name


def test_the_workers_write_port_answers_where_each_record_went() -> None:
    """The back-check's writes log what a producer's commit answers (§9): partition and offset."""
    from ferry.netguard import EndpointPolicy
    from ferry.worker.sinks import TxnSink

    class Producer:
        sent: list[tuple[str, bytes | None, int | None]] = []

        async def send(
            self, topic: str, value: bytes | None, key: bytes | None = None, headers: Any = None, partition: Any = None
        ) -> tuple[int, int]:
            self.sent.append((topic, value, partition))
            return (partition if partition is not None else 1, 40 + len(self.sent))

    async def scenario() -> list[dict[str, Any]]:
        sink = TxnSink(Producer(), "__ferry_txn", EndpointPolicy(), 3)  # type: ignore[arg-type]
        try:
            return await sink._write(ID, [{**RECORDS[0], "partition": 2}, RECORDS[1]])
        finally:
            sink.close()

    assert asyncio.run(scenario()) == [{"partition": 2, "offset": 41}, {"partition": 1, "offset": 42}]
