"""The ``ferry`` console script (docs/contract.md §1). Each command imports its service lazily,
so ``ferry portal`` never loads the worker and ``ferry worker`` never loads SQLAlchemy."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ferry import config, lifeline
from ferry.errors import FerryError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ferry", description="Kafka proxy cluster: services, `ferry dev`, and client commands."
    )
    p.add_argument("--config", help="ferry.toml with settings (environment variables win)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # `ferry worker --config f.toml` as well as `ferry --config f.toml worker`
    settings = argparse.ArgumentParser(add_help=False)
    settings.add_argument("--config", default=argparse.SUPPRESS, help="ferry.toml with settings (env wins)")

    def service(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, parents=[settings])

    dev = service("dev", "start the whole embedded stack on this machine")
    dev.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    dev.add_argument("--portal-port", type=int, default=8080, help="portal port (0 = free port; default 8080)")
    dev.add_argument("--gateway-port", type=int, default=8081, help="gateway port (0 = free port; default 8081)")
    dev.add_argument("--kafka-port", type=int, default=9092, help="broker port (0 = free port; default 9092)")
    dev.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper port (0 = free port; default 2181)")
    dev.add_argument("--data-dir", default=".ferry-dev", help="state, logs and database (default ./.ferry-dev)")
    dev.add_argument(
        "--demo", action="store_true", help="also run a demo topic, producer, echo endpoint and subscription"
    )
    dev.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME[:PARTITIONS]",
        help="create this topic in the broker (default 1 partition; repeatable)",
    )

    service("coordinator", "run a coordinator (one leader is elected among all)")
    worker = service("worker", "run a worker")
    worker.add_argument(
        "--assignment",
        help="JSON file with a static assignment (subscriptions and partitions) instead of ZooKeeper",
    )
    service("portal", "run the portal: REST API and web UI")
    service("gateway", "run a gateway: produce to Kafka over HTTP")
    service("migrate", "apply database migrations to FERRY_DB_URL (idempotent)")

    replay = service("replay", "Spark offset replay: timelines, handoffs, report")
    replay.add_argument("--out", required=True, help="output directory")
    replay.add_argument("--subscription", help="only this subscription")
    replay.add_argument("--since", help="only records at or after this time (ISO 8601 or epoch ms)")
    replay.add_argument("--until", help="only records before this time (ISO 8601 or epoch ms)")

    service("config", "print the effective settings, secrets masked")

    from ferry.client import commands as client_commands

    client_commands.add_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `ferry subscriptions list | head`: the reader left, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    from ferry.client import commands as client_commands

    if args.command in client_commands.NAMES:
        return client_commands.run(args)
    try:
        settings = config.load(args.config)
        from ferry import log

        log.setup(settings.log.level, settings.log.format)
        if args.command == "config":
            print(json.dumps(config.describe(settings), indent=2))
            return 0
        if args.command == "dev":
            from ferry.devstack import dev

            return dev.main(settings, args)
        if args.command in ("worker", "coordinator", "portal", "gateway"):
            lifeline.hold()  # started by `ferry dev`: end when it is gone
        if args.command == "worker":
            from ferry.worker import service as worker_service

            return worker_service.main(settings, assignment_file=args.assignment)
        if args.command == "coordinator":
            from ferry.coordinator import service as coordinator_service

            return coordinator_service.main(settings)
        if args.command == "portal":
            from ferry.portal import service as portal_service

            return portal_service.main(settings)
        if args.command == "gateway":
            from ferry.gateway import service as gateway_service

            return gateway_service.main(settings)
        if args.command == "migrate":
            from ferry.migrations import runner

            runner.upgrade(settings.database.url)
            return 0
        if args.command == "replay":
            from ferry.replay import job

            return job.main(settings, out=args.out, subscription=args.subscription, since=args.since, until=args.until)
    except FerryError as exc:
        print(f"ferry {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
