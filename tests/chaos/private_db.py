"""A private MariaDB server for one scenario, so stopping it never touches the shared one on 3306.

States: installed (``mariadb-install-db`` into a temp data dir) → running (``mariadbd`` on a free
loopback port) → stopped (SIGTERM, clean shutdown) → running again on the same port and data dir.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import sqlalchemy as sa

from ferry.devstack import embedded


class PrivateMariaDB(embedded.ServiceProcess):
    @classmethod
    def install(cls, base: Path) -> PrivateMariaDB:
        server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        data = base / "data"
        base.mkdir(parents=True, exist_ok=True)
        with (base / "install.log").open("wb") as log:
            subprocess.run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={data}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--user=root",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=120,
            )
        port = embedded.free_port()
        argv = [
            server,
            "--no-defaults",
            f"--datadir={data}",
            f"--port={port}",
            f"--socket={base / 'sock'}",
            f"--pid-file={base / 'pid'}",
            "--bind-address=127.0.0.1",
            "--user=root",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=16M",
        ]
        return cls("mariadb-private", argv, port, base / "mariadbd.log")

    @property
    def admin_url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/mysql"

    def ready(self) -> bool:
        engine = sa.create_engine(self.admin_url)
        try:
            with engine.connect() as c:
                c.execute(sa.text("SELECT 1"))
            return True
        except sa.exc.OperationalError:
            return False
        finally:
            engine.dispose()

    def database(self, name: str) -> str:
        engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as c:
                c.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        finally:
            engine.dispose()
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{name}"
