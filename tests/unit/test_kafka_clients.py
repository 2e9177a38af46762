"""Every confluent-kafka client Ferry creates is made by ``ferry.kafka``'s factories, so none is
missed when librdkafka's log is routed into Ferry's (``ferry.kafka_log``). Checked on the source,
like the import layering: a new ``Consumer(...)`` anywhere else fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ferry", "worker", "coordinator", "portal", "replay", "migrations")
CLIENTS = {"Consumer", "Producer", "AdminClient", "DeserializingConsumer", "SerializingProducer"}
FACTORIES = "ferry/kafka.py"


def client_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of a confluent-kafka client class, by name, under an ``import ... as`` alias, or as
    ``confluent_kafka.X``/``cimpl.X``."""
    names = set(CLIENTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("confluent_kafka"):
            names |= {a.asname for a in node.names if a.name in CLIENTS and a.asname}
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (isinstance(f, ast.Name) and f.id in names) or (isinstance(f, ast.Attribute) and f.attr in CLIENTS):
            calls.append(node)
    return calls


def test_clients_are_made_only_by_ferry_kafka() -> None:
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == FACTORIES:
                continue
            for call in client_calls(ast.parse(path.read_text(), rel)):
                bad.append(f"{rel}:{call.lineno}: {ast.unparse(call.func)}(...)")
    assert not bad, (
        "make confluent-kafka clients with ferry.kafka.consumer/producer/admin (they route librdkafka's"
        " log into Ferry's):\n" + "\n".join(bad)
    )


def test_the_factories_give_every_client_the_logger() -> None:
    calls = client_calls(ast.parse((ROOT / FACTORIES).read_text()))
    assert {ast.unparse(c.func) for c in calls} == {"Consumer", "Producer", "AdminClient"}
    for call in calls:
        (arg,) = call.args
        assert isinstance(arg, ast.Call) and ast.unparse(arg.func) == "with_logger", ast.unparse(call)
        assert not call.keywords, ast.unparse(call)


def test_the_checker_finds_direct_clients() -> None:
    src = (
        "from confluent_kafka import Consumer, Producer as P\n"
        "import confluent_kafka\n"
        "a = Consumer({})\nb = P({})\nc = confluent_kafka.admin.AdminClient({})\nd = kafka.consumer({}, 'x')\n"
    )
    assert [c.lineno for c in client_calls(ast.parse(src))] == [3, 4, 5]
