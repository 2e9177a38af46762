"""The client commands: one function each, called by ``ferry.cli`` with the parsed arguments.

Every command prints its result (a table, or ``-o json|yaml``) and returns the exit code; errors
are one line on stderr: 0 ok, 1 error, 2 usage, 3 not found, 4 not allowed (401/403), 5 conflict
(409/422), 6 unreachable or unavailable (docs/cli.md).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ferry.client import plan as planner
from ferry.client.api import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Client, ClientError, Profile
from ferry.client.output import concurrency_table, render, table
from ferry.errors import ValidationError

PRODUCE_BATCH = 500
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` or a bare number of milliseconds, as milliseconds."""
    t = text.strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if t.endswith(u)), "")
    number = t[: len(t) - len(unit)] if unit else t
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValidationError("--delay", f"{text!r} is not a duration: give e.g. 500ms, 30s, 5m, 2h or 1d")
    return max(1, round(value * _UNITS_MS[unit or "ms"]))


def headers_of(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` arguments as record headers."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValidationError("--header", f"{pair!r} is not NAME=VALUE")
        out[name] = value
    return out


def add_parsers(sub: Any) -> None:
    login = sub.add_parser("login", help="save the portal URL and token for the client commands (mode 0600)")
    login.add_argument("url", help="the portal's URL, e.g. http://127.0.0.1:8080")
    login.add_argument("--token", required=True, help="an API token (read, admin)")
    login.add_argument("--gateway-url", default="", help="the gateway's URL, for `ferry produce`")

    subs = sub.add_parser("subscriptions", help="list, inspect and operate subscriptions")
    subs.add_argument("action", choices=["list", "get", "status", "pause", "resume", "reset", "delete"])
    subs.add_argument("name", nargs="?")
    subs.add_argument("--to", help="reset: earliest, latest or epoch ms")
    subs.add_argument("--cluster", help="reset: only this Kafka cluster's partitions (default: every cluster's)")
    _output(subs)

    apply = sub.add_parser("apply", help="make the portal's subscriptions match YAML/JSON files (GitOps)")
    apply.add_argument("-f", "--file", action="append", required=True, help="a file or directory (repeatable)")
    apply.add_argument("--prune", action="store_true", help="delete subscriptions the files no longer list")
    apply.add_argument("--dry-run", action="store_true", help="show the changes, change nothing")
    apply.add_argument("--force", action="store_true", help="update every listed subscription")

    dl = sub.add_parser("dead-letters", help="list a subscription's dead letters, or redrive them")
    dl.add_argument("action", choices=["list", "redrive"])
    dl.add_argument("name")
    dl.add_argument("--limit", type=int, default=100)
    dl.add_argument("--cluster", help="the Kafka cluster whose dead-letter topic to read (default: default)")
    _output(dl)

    produce = sub.add_parser("produce", help="write lines from stdin to a topic through the gateway")
    produce.add_argument("topic")
    produce.add_argument("--key-sep", help="split each line into key and value at the first SEP")
    produce.add_argument("--delay", help="deliver each record after this long: 500ms, 30s, 5m, 2h, 1d (docs/delay.md)")
    produce.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE", help="a header on every record (repeatable)"
    )
    produce.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="send request N with Idempotency-Key KEY/N: the same command run again with the same KEY and "
        "input writes nothing twice (docs/gateway.md)",
    )
    produce.add_argument("--gateway-url", help="the gateway's URL (default: from login or FERRY_GATEWAY_URL)")
    _output(produce)

    delays = sub.add_parser("delays", help="the delay store: records scheduled, the next one due, lateness")
    _output(delays)

    txn = sub.add_parser("transactions", help="the prepared transactions; commit or roll back one in doubt")
    txn.add_argument("action", choices=["list", "get", "commit", "rollback"])
    txn.add_argument("id", nargs="?", help="the id the gateway answered when the transaction was prepared")
    txn.add_argument("--gateway-url", help="the gateway's URL (default: from login or FERRY_GATEWAY_URL)")
    _output(txn)

    trace = sub.add_parser("trace", help="where is a record: TOPIC/PARTITION/OFFSET of a subscription")
    trace.add_argument("record", help="TOPIC/PARTITION/OFFSET")
    trace.add_argument("--subscription", "-s", required=True)
    trace.add_argument("--cluster", help="the Kafka cluster the record is in (default: default)")
    _output(trace)


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "login":
            return login(args)
        client = Client(_profile(args))
        try:
            return HANDLERS[args.command](client, args)
        finally:
            client.close()
    except ClientError as exc:
        print(f"ferry {args.command}: {exc}" + (f" (field {exc.field})" if exc.field else ""), file=sys.stderr)
        return exc.exit_code
    except planner.DocumentError as exc:
        print(f"ferry {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ValidationError as exc:
        print(f"ferry {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _profile(args: argparse.Namespace) -> Profile:
    p = Profile.load()
    gateway = getattr(args, "gateway_url", None)
    return Profile(p.url, p.token, gateway.rstrip("/")) if gateway else p


def login(args: argparse.Namespace) -> int:
    profile = Profile(args.url.rstrip("/"), args.token, args.gateway_url.rstrip("/"))
    client = Client(profile)
    try:
        client.call("GET", "/api/v1/subscriptions")  # the token works
    finally:
        client.close()
    path = profile.save()
    print(f"logged in to {profile.url}; saved to {path}")
    return EXIT_OK


def _need_name(args: argparse.Namespace) -> str:
    if not args.name:
        raise ValidationError("name", f"`ferry subscriptions {args.action}` needs a subscription name")
    return str(args.name)


def _health_cells(h: dict[str, Any] | None) -> dict[str, Any]:
    return {"health": h["health"], "lag": h["lag"]} if h else {"health": "unknown", "lag": None}


def subscriptions(c: Client, args: argparse.Namespace) -> int:
    if args.action == "list":
        subs = c.call("GET", "/api/v1/subscriptions")["subscriptions"]
        health = {}
        if args.output == "table":  # the badge and lag beside each (scripts read /api/v1/health)
            health = {h["name"]: h for h in c.call("GET", "/api/v1/health")["subscriptions"]}
        rows = [{**s, "endpoint": s["endpoint"]["url"], **_health_cells(health.get(s["name"]))} for s in subs]
        cols = ["name", "state", "health", "lag", "topics", "endpoint", "ordering"]
        print(render(subs, args.output, cols, rows))
        return EXIT_OK
    name = _need_name(args)
    base = f"/api/v1/subscriptions/{name}"
    if args.action == "get":
        print(render(c.call("GET", base), "yaml" if args.output == "table" else args.output))
    elif args.action == "status":
        st = c.call("GET", base + "/status")
        cols = ["topic", "partition", "worker", "committed", "high_watermark", "lag", "in_flight", "dead_lettered"]
        if any(row.get("cluster", "default") != "default" for row in st["partitions"]):
            cols.insert(0, "cluster")  # several Kafka clusters: the same topic/partition once per cluster
        print(render(st, args.output, cols, st["partitions"]))
        if args.output == "table":
            if st.get("concurrency"):
                print("\n" + concurrency_table(st["concurrency"]))
            for warning in st.get("warnings", []):
                print(f"warning: {warning}", file=sys.stderr)
    elif args.action in ("pause", "resume"):
        doc = c.call("POST", f"{base}/{args.action}")
        print(render(doc, args.output) if args.output != "table" else f"{name}: {doc['state']}")
    elif args.action == "reset":
        if not args.to:
            raise ValidationError("--to", "reset needs --to earliest|latest|<epoch ms>")
        to: Any = int(args.to) if args.to.isdigit() else args.to
        body: dict[str, Any] = {"to": to}
        if args.cluster:
            body["cluster"] = args.cluster
        doc = c.call("POST", base + "/reset", body=body)
        print(render(doc, args.output, ["topic", "partition", "committed"], doc.get("partitions", [])))
    elif args.action == "delete":
        c.call("DELETE", base)
        print(f"{name}: deleted")
    return EXIT_OK


def apply(c: Client, args: argparse.Namespace) -> int:
    desired = planner.load_documents(args.file)
    current = c.call("GET", "/api/v1/subscriptions")["subscriptions"]
    p = planner.plan(current, desired, prune=args.prune, force=args.force)
    refused = _refusals(c, p)
    if refused:
        for name, exc in refused:
            print(f"ferry apply: {name}: " + (f"{exc.field}: " if exc.field else "") + str(exc), file=sys.stderr)
        print(f"nothing changed: the portal refuses {len(refused)} of the documents", file=sys.stderr)
        return EXIT_ERROR
    for doc in p.create:
        print(f"+ create {doc['name']}")
        print(planner.diff(None, planner.normalise(doc), doc["name"]), end="")
    for cur, doc in p.update:
        print(f"~ update {doc['name']}")
        print(planner.diff(cur, planner.normalise(doc), doc["name"]), end="")
    for name in p.delete:
        print(f"- delete {name}")
    if p.empty:
        n = len(p.unchanged)
        print(f"no changes ({n} subscription{'' if n == 1 else 's'} as the files say)")
        return EXIT_OK
    if args.dry_run:
        print("dry run: nothing changed")
        return EXIT_OK
    for doc in p.create:
        c.call("POST", "/api/v1/subscriptions", body=doc)
    for _, doc in p.update:
        c.call("PUT", f"/api/v1/subscriptions/{doc['name']}", body=doc)
    for name in p.delete:
        c.call("DELETE", f"/api/v1/subscriptions/{name}")
    print(f"applied: {len(p.create)} created, {len(p.update)} updated, {len(p.delete)} deleted")
    return EXIT_OK


def _refusals(c: Client, p: planner.Plan) -> list[tuple[str, ClientError]]:
    """Every create and update of the plan checked by the portal without storing (``dry_run``),
    so that a plan is applied whole or not at all; the documents it refuses, with why."""
    refused = []
    checks = [("POST", "/api/v1/subscriptions", doc) for doc in p.create]
    checks += [("PUT", f"/api/v1/subscriptions/{quote(doc['name'], safe='')}", doc) for _, doc in p.update]
    for method, path, doc in checks:
        try:
            c.call(method, path, body=doc, dry_run="true")
        except ClientError as exc:
            if exc.status not in (400, 404, 409, 413):
                raise  # unreachable, or not allowed: nothing to say per document
            refused.append((str(doc["name"]), exc))
    return refused


def dead_letters(c: Client, args: argparse.Namespace) -> int:
    base = f"/api/v1/subscriptions/{args.name}/dead-letters"
    if args.action == "list":
        doc = c.call("GET", base, limit=args.limit, cluster=args.cluster)
        cols = ["source_topic", "source_partition", "source_offset", "attempts", "error", "key"]
        print(render(doc, args.output, cols, doc["dead_letters"]))
    else:
        body: dict[str, Any] = {"limit": args.limit}
        if args.cluster:
            body["cluster"] = args.cluster
        doc = c.call("POST", base + "/replay", body=body)
        print(render(doc, args.output) if args.output != "table" else f"redriven: {doc.get('replayed')}")
    return EXIT_OK


def produce(c: Client, args: argparse.Namespace) -> int:
    written = scheduled = failed = replayed = 0
    batch: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    key = args.idempotency_key
    if key is not None and not (1 <= len(key) <= 240 and key.isascii() and key.isprintable() and " " not in key):
        raise ValidationError("--idempotency-key", "must be 1-240 visible ASCII characters (the gateway adds /N)")
    requests = 0
    if args.delay:
        extra["delay_ms"] = duration_ms(args.delay)
    if args.header:
        extra["headers"] = headers_of(args.header)

    def flush() -> None:
        nonlocal written, scheduled, failed, replayed, requests
        if not batch:
            return
        requests += 1
        once = {"Idempotency-Key": f"{key}/{requests}"} if key else None
        path = f"/api/v1/topics/{args.topic}/records"
        doc = c.call("POST", path, body={"records": batch}, gateway=True, headers=once)
        replayed += len(batch) if c.replayed else 0
        for r in doc["results"]:
            results.append(r)
            if "error" in r:
                failed += 1
            elif r.get("scheduled"):
                scheduled += 1
            else:
                written += 1
        batch.clear()

    for line in sys.stdin:
        line = line.rstrip("\n")
        if args.key_sep and args.key_sep in line:
            key, value = line.split(args.key_sep, 1)
            batch.append({"key": key, "value": value, **extra})
        else:
            batch.append({"value": line, **extra})
        if len(batch) >= PRODUCE_BATCH:
            flush()
    flush()
    if args.output != "table":
        summary = {"written": written, "scheduled": scheduled, "failed": failed, "repeated": replayed}
        print(render({**summary, "results": results}, args.output))
    else:
        done = [f"{written} written to {args.topic}"] if written or not scheduled else []
        if scheduled:
            due = max(r["deliver_at"] for r in results if r.get("scheduled"))
            done.append(f"{scheduled} scheduled for {args.topic} (the last due at {_iso(due)})")
        again = f" ({replayed} of them by an earlier run with this key: not written again)" if replayed else ""
        print(", ".join(done) + (f", {failed} refused" if failed else "") + again)
        _name_refused([(f"line {i}", r) for i, r in enumerate(results, 1)])
    return EXIT_OK if not failed else 1


def _name_refused(answers: list[tuple[str, dict[str, Any]]]) -> None:
    """On stderr, the first ten of ``(where, answer)`` that are errors, and how many more."""
    refused = [(where, r["error"]) for where, r in answers if "error" in r]
    for where, error in refused[:10]:
        print(f"{where}: {error}", file=sys.stderr)
    if len(refused) > 10:
        print(f"... and {len(refused) - 10} more (every answer: -o json)", file=sys.stderr)


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def trace(c: Client, args: argparse.Namespace) -> int:
    parts = args.record.rsplit("/", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValidationError("record", "give TOPIC/PARTITION/OFFSET, e.g. orders/3/4711")
    topic, partition, offset = parts
    path = f"/api/v1/subscriptions/{args.subscription}/records/{topic}/{partition}/{offset}"
    doc = c.call("GET", path, cluster=args.cluster)
    if args.output == "table":
        print(table(["field", "value"], [{"field": k, "value": v} for k, v in doc.items()]))
    else:
        print(render(doc, args.output))
    return EXIT_OK


def delays(c: Client, args: argparse.Namespace) -> int:
    doc = c.call("GET", "/api/v1/delays")
    if args.output != "table":
        print(render(doc, args.output))
        return EXIT_OK
    due = doc.get("next_due")
    row = {**doc, "next_due": None if due is None else _iso(due)}
    print(table(["scheduled", "next_due", "late_p99_ms"], [row]))
    return EXIT_OK


def transactions(c: Client, args: argparse.Namespace) -> int:
    """``get`` a transaction's state, or ``commit`` / ``rollback`` it by hand (one whose back-check
    endpoint cannot answer, docs/transactions.md)."""
    if args.action == "list":
        return _prepared(c, args)
    if not args.id:
        raise ValidationError("id", f"transactions {args.action} needs the transaction's id")
    path = f"/api/v1/transactions/{quote(args.id, safe='')}"
    if args.action == "get":
        doc = c.call("GET", path, gateway=True)
    else:
        doc = c.call("POST", f"{path}/{args.action}", gateway=True)
    if args.output != "table":
        print(render(doc, args.output))
        return EXIT_OK
    line = f"{doc['id']}: {doc['state']}"
    if "checks" in doc:
        line += f", {doc['checks']} back-check(s) so far"
    results = doc.get("results") or []
    failed = [r for r in results if "error" in r]
    if results:
        line += f", {len(results) - len(failed)} record(s) written"
    print(line)
    _name_refused([(f"records[{i}]", r) for i, r in enumerate(results)])
    return EXIT_OK if not failed else 1


def _prepared(c: Client, args: argparse.Namespace) -> int:
    doc = c.call("GET", "/api/v1/transactions", state="prepared")
    if args.output != "table":
        print(render(doc, args.output))
        return EXIT_OK
    rows = [{**t, "age_s": round(t["age_s"], 1)} for t in doc["transactions"]]
    print(table(["id", "age_s", "checks", "timeout_ms", "worker"], rows))
    counters = doc["counters"]
    print(
        f"\nsince the workers started: {counters['committed']} committed, {counters['rolled_back']} rolled back, "
        f"{counters['checks']} back-checks ({counters['check_failures']} failed)"
    )
    return EXIT_OK


HANDLERS = {
    "subscriptions": subscriptions,
    "apply": apply,
    "dead-letters": dead_letters,
    "produce": produce,
    "trace": trace,
    "delays": delays,
    "transactions": transactions,
}
"""The commands that call the portal or the gateway with the saved profile, by name."""

NAMES = frozenset({"login", *HANDLERS})
"""Every command :func:`add_parsers` adds; ``ferry.cli`` hands these to :func:`run`."""
