"""A throwaway PostgreSQL cluster for the tests: made with Debian's `initdb` in a temporary
folder (as the `postgres` user when the tests run as root: initdb refuses root), listening only
on a Unix socket in that folder, trusting local connections; one a test process, a database a
test. Stopped and removed when the tests end."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

USER = "fw"


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in argv)]


class Cluster:
    def __init__(self) -> None:
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries (Debian: apt-get install postgresql)")
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="fw-pg-"))
        os.chmod(self.dir, 0o777)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self.data = self.dir / "data"
        run = lambda argv: subprocess.run(_as_owner(argv), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: E731
        run([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "--no-sync"])
        run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-o",
             f"-k {self.dir} -c listen_addresses= -c fsync=off -c synchronous_commit=off -c max_connections=300", "start"])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@/{database}?host={self.dir}"

    def new_database(self) -> str:
        import psycopg

        name = f"fw_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        subprocess.run(_as_owner([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)
