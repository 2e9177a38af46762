"""Alembic environment: runs against the connection or URL that ``migrations.runner`` hands in."""

from __future__ import annotations

from alembic import context

from ferry.db import Base, make_engine

config = context.config
target_metadata = Base.metadata


def _configure(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode rebuilds tables instead.
        render_as_batch=True,
    )


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: set FERRY_DB_URL and run `ferry migrate`")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


run()
