"""Coverage-guided fuzzing (atheris) of each C twin against its Python reference.

    python -m tests.support.fuzz_native encode CORPUS_DIR -runs=20000 -max_len=2048
    python -m tests.support.fuzz_native records CORPUS_DIR -runs=20000 -max_len=2048
    python -m tests.support.fuzz_native body CORPUS_DIR -runs=20000 -max_len=2048
    python -m tests.support.fuzz_native replay encode CORPUS_DIR    # every input once, no fuzzing

``encode``: records made from the fuzzer's bytes (keys, values — JSON or not, valid UTF-8 or
not —, header sets, topics, partitions, offsets past 64 bits, timestamps, attempts) → the body
worker/_encode.c builds must be the body worker.batch.EventEncoder builds, byte for byte.
``records``: fake consumed messages (payloads, headers, errors, partition ends) → worker/_records.c
must build what worker.fetch.build_batch_py builds. ``body``: produce request bodies (the bytes
as they are, or inside a record) → what gateway/_body.h takes must be what records.loads and
parse_request make. Any difference, or any exception but the ones
both paths raise alike, is a crash with the input saved by libFuzzer.

atheris guides the search by the coverage of the Python side (the reference and the harness);
the C side is exercised by every input. tests/integration/test_native_sanitized.py fuzzes so
into a corpus, then replays the corpus against a build of the C twins under AddressSanitizer and
UBSan, which turn a memory or undefined-behaviour error into a crash. (Coverage of the C code
itself would need clang's -fsanitize=fuzzer, and atheris's coverage does not survive gcc's ASan
runtime being preloaded: hence the two steps.)
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

TOPICS = ["orders", "ünï/code", "t"]
HEADER_NAMES = ["content-type", "Content-Type", "x", "traceparent", "ferry-deliver-at"]


def _bytes_or_none(fdp: Any, most: int) -> bytes | None:
    return None if fdp.ConsumeBool() else fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, most))


def _headers(fdp: Any) -> list[tuple[str, bytes | None]]:
    return [(fdp.PickValueInList(HEADER_NAMES), _bytes_or_none(fdp, 40)) for _ in range(fdp.ConsumeIntInRange(0, 3))]


def encode_one(data: bytes) -> None:
    import atheris

    from ferry.worker import batch
    from ferry.worker.push import Record

    fdp = atheris.FuzzedDataProvider(data)
    records, attempts = [], []
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        headers = tuple(_headers(fdp))
        offset = fdp.PickValueInList([0, fdp.ConsumeIntInRange(0, 10**7), 2**63 - 1, 2**64 + 3])
        ts = fdp.PickValueInList([-1, 0, 1_763_800_000_999, fdp.ConsumeIntInRange(-5000, 2**41)])
        record = Record(
            fdp.PickValueInList(TOPICS), fdp.ConsumeIntInRange(0, 3), offset, _bytes_or_none(fdp, 24),
            _bytes_or_none(fdp, 200), headers, ts,
        )  # fmt: skip
        records.append(record)
        attempts.append(fdp.ConsumeIntInRange(1, 1000))
    c_encoder, py_encoder = batch.EventEncoder("prod", "sub"), batch.EventEncoder("prod", "sub")
    native = _module("_encode")
    body = native.encode_batch(c_encoder, records, attempts, batch._JSON_MAX_DEPTH)
    if body is NotImplemented:
        return  # a shape the C path leaves to Python
    want = ("[" + ",".join(py_encoder.events(records, attempts)) + "]").encode()
    if body != want:
        raise AssertionError(f"C and Python bodies differ for {records!r} / {attempts!r}:\n{body!r}\n{want!r}")


def records_one(data: bytes) -> None:
    import atheris
    from confluent_kafka import KafkaError, Message

    from ferry.worker import fetch

    fdp = atheris.FuzzedDataProvider(data)
    msgs = []
    for _ in range(fdp.ConsumeIntInRange(0, 12)):
        error = None
        if fdp.ConsumeIntInRange(0, 9) == 0:
            error = KafkaError(fdp.PickValueInList([KafkaError._PARTITION_EOF, KafkaError._TRANSPORT]))
        topic = fdp.PickValueInList(TOPICS)  # drawn in this order: the corpus depends on it
        partition = fdp.ConsumeIntInRange(0, 3)
        offset = fdp.ConsumeIntInRange(0, 2**40)
        key, value = _bytes_or_none(fdp, 24), _bytes_or_none(fdp, 200)
        headers: list[tuple[str, str | bytes | None]] = list(_headers(fdp))
        msgs.append(
            Message(
                topic=topic,
                partition=partition,
                offset=offset,
                key=key,
                value=value,
                headers=headers or None,
                timestamp=(1, fdp.PickValueInList([-1, 0, fdp.ConsumeIntInRange(0, 2**42)])),
                error=error,
            )
        )
    native = fetch._native_call(_module("_records").build, msgs, {})
    reference = fetch.build_batch_py(msgs, {})
    got = (native[0], native[1], [(t, p, e.code()) for t, p, e in native[2]])
    want = (reference[0], reference[1], [(t, p, e.code()) for t, p, e in reference[2]])
    if got != want:
        raise AssertionError(f"C and Python builds differ for {msgs!r}:\n{got!r}\n{want!r}")


def body_one(data: bytes) -> None:
    """gateway/_body.h: a body (the input as it is, or the input as a record's value, or as a
    record's fields) that the C reader takes must give the records the long way makes of it."""
    from ferry.gateway import records

    wrappers = [b"%s", b'{"records":[{"value":%s}]}', b'{"records":[{%s}]}', b'{"records":[{"key":"k","value":%s},{}]}']
    raw = wrappers[data[0] % len(wrappers)] % data[1:] if data else b""
    got = records.read_plain(raw, "t")
    try:  # run either way: its coverage guides the search
        want: Any = records.parse_request(records.loads(raw), "t", 0)
    except Exception as exc:
        want = exc
    if got is not None and got != want:
        raise AssertionError(f"the C reader and the long way differ for {raw!r}:\n{got!r}\n{want!r}")


BODY_SEEDS = [
    b'\x00{"records":[{"key":"k","value":{"n":1,"s":"a\\"b"}},{"value":"t\\n"},{}]}',
    b'\x01 { "a" : [ 1.5 , -2 , true , null , "\xc3\xa9" ] }',
    b'\x02"key":null,"value":[0.25,{"x":{}}]',
    b'\x03"x\\/y"',
]


def _module(name: str) -> Any:
    from ferry.worker import native

    module = native.load(name)
    if module is None:
        raise SystemExit(f"worker.{name} is not built: python3 setup.py build_ext --inplace")
    return module


TARGETS = {"encode": encode_one, "records": records_one, "body": body_one}


def replay(target: str, corpus: str) -> int:
    """Run every input of ``corpus`` (a directory) through ``target`` once; how many."""
    from pathlib import Path

    inputs = sorted(p for p in Path(corpus).iterdir() if p.is_file())
    for path in inputs:
        TARGETS[target](path.read_bytes())
    return len(inputs)


def main(argv: list[str]) -> None:
    if len(argv) == 4 and argv[1] == "replay" and argv[2] in TARGETS:
        print(f"replayed {replay(argv[2], argv[3])} inputs through {argv[2]}: no difference")
        return
    from pathlib import Path

    import atheris

    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: python -m tests.support.fuzz_native {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target = TARGETS[argv[1]]
    corpus = next((Path(a) for a in argv[2:] if not a.startswith("-")), None)
    if argv[1] == "body" and corpus is not None and not any(corpus.iterdir()):
        for i, seed in enumerate(BODY_SEEDS):  # valid bodies to mutate: random bytes rarely are one
            (corpus / f"seed-{i}").write_bytes(seed)
    with atheris.instrument_imports():  # the references, instrumented for coverage
        for module in ("ferry.worker.batch", "ferry.worker.fetch", "ferry.gateway.records"):
            importlib.import_module(module)
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
