"""Every test drives fw through its front door, on a fresh home of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.testing
from typer.testing import CliRunner

from framework_cli.cli.main import build_app

REPO = Path(__file__).resolve().parent.parent
SAMPLE_HOME = REPO / "sample_home"
CANARY = "sk-CANARY-7f3a9c1e5b2d4f60"
# A second canary whose URL-encoded, HTML-escaped and JSON-escaped forms all differ from it.
ODD_CANARY = "sk-ODD/Canary+4e=9b&7c<2d>'a1\"f0"
APP = build_app()


def canary_marks(value: str) -> list[str]:
    """What shows that a secret leaked: the first half of it, and of each form a server may
    echo it in (URL-encoded, HTML-escaped, JSON-escaped), so that a cut key counts too (any
    leading piece of at least half a secret is one)."""
    import html
    from urllib.parse import quote, quote_plus

    escaped = json.dumps(value)[1:-1]
    found = {value, quote(value, safe=""), quote_plus(value, safe=""), quote(value), quote_plus(value, safe="/"),
             html.escape(value), html.escape(value, quote=False), html.escape(value).replace("&quot;", "&#34;").replace("&#x27;", "&#39;"),
             "".join(c if c.isalnum() or c in "-_." else f"&#{ord(c)};" for c in value),  # every sign a numeric entity
             escaped, escaped.replace("/", "\\/"),
             escaped.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")}  # as Go's encoder writes it
    return sorted({form[: (len(form) + 1) // 2] for form in found})


LEAK_MARKS = canary_marks(CANARY) + canary_marks(ODD_CANARY)


def leaked(text: str) -> str | None:
    """The canary mark in `text`, if any."""
    return next((mark for mark in LEAK_MARKS if mark in text), None)

# Typer turns the app into a click command on every CliRunner.invoke: for fw's whole app that is
# most of an in-process call's time. The command is built from the same app each time, so build
# it once per test process (an installed `fw` still builds its own on every start).
_build_command = typer.testing._get_command
_click_command = _build_command(APP)
typer.testing._get_command = lambda app: _click_command if app is APP else _build_command(app)


class Result:
    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr

    @property
    def json(self):
        return json.loads(self.stdout)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __repr__(self) -> str:
        return f"Result(exit={self.exit_code}, stdout={self.stdout[:2000]!r}, stderr={self.stderr[:2000]!r})"


def fw(*args: str, input: str | None = None, env: dict | None = None) -> Result:
    """Run fw in-process through Typer's CliRunner."""
    runner = CliRunner()
    result = runner.invoke(APP, list(args), input=input, env=env, catch_exceptions=False)
    # Every output of every test is checked for the canary keys, in every form and cut: a leak anywhere fails.
    assert not leaked(result.stdout + result.stderr), f"a canary key leaked: fw {' '.join(args)}"
    return Result(result.exit_code, result.stdout, result.stderr)


def fwj(*args: str, input: str | None = None, code: int = 0):
    """Run fw with --json and return the parsed document, checking the exit code."""
    result = fw(*args, "--json", input=input)
    assert result.exit_code == code, result
    assert "Traceback" not in result.output
    return result.json


def fw_bin() -> str:
    found = shutil.which("fw", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert found, "the fw console script is not installed"
    return found


def fw_proc(*args: str, input: str | None = None, home: Path | None = None, timeout: float = 60) -> Result:
    """Run the installed fw console script in a subprocess."""
    env = dict(os.environ)
    if home is not None:
        env["FW_HOME"] = str(home)
    proc = subprocess.run([fw_bin(), *args], input=input, capture_output=True, text=True, env=env, timeout=timeout)
    assert not leaked(proc.stdout + proc.stderr), f"a canary key leaked: fw {' '.join(args)}"
    return Result(proc.returncode, proc.stdout, proc.stderr)


def state_rows(home: Path, sql: str, params: tuple = ()) -> list[dict]:
    """Rows of the home's state store (state.db, read-only; or the PostgreSQL database of
    FW_STATE): what a test checks that the product wrote."""
    import sqlite3

    if os.environ.get("FW_STATE"):
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(os.environ["FW_STATE"], autocommit=True, row_factory=dict_row) as conn:
            return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
    db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in db.execute(sql, params)]
    finally:
        db.close()


def state_execute(home: Path, sql: str, params: tuple = ()) -> None:
    """Change the home's state store by hand (a test's time travel, a damage)."""
    from framework_cli.home.store import Home
    from framework_cli.state.store import StateStore

    with StateStore.open(Home(home)) as store, store.transaction():
        store.execute(sql, params)


def audit_entries(home: Path) -> list[dict]:
    """Every line of the audit log, oldest first: audit.jsonl, or the store's table."""
    if os.environ.get("FW_STATE"):
        return [json.loads(r["line"]) for r in state_rows(home, "SELECT line FROM audit ORDER BY seq")]
    path = home / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_record_text(home: Path, run_id: str) -> str:
    """A run's record as it is kept: its file in runs/, or its row of the store."""
    if os.environ.get("FW_STATE"):
        rows = state_rows(home, "SELECT record FROM runs WHERE run_id = ?", (run_id,))
        return rows[0]["record"]
    return (home / "runs" / f"{run_id}.json").read_text()


def write_run_record(home: Path, run_id: str, text: str) -> None:
    """Change a run's record by hand (a test's tampering, a damage)."""
    if os.environ.get("FW_STATE"):
        import psycopg

        with psycopg.connect(os.environ["FW_STATE"], autocommit=True) as conn:
            conn.execute("UPDATE runs SET record = %s WHERE run_id = %s", (text, run_id))
        return
    (home / "runs" / f"{run_id}.json").write_text(text)


def snapshot(home: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of the home with its bytes, mode and mtime, except fw's own cache and lock."""
    out = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home).as_posix()
        if rel.split("/", 1)[0] in (".index", ".index.json", ".lock", ".locks"):
            continue
        st = path.stat()
        out[rel] = (path.read_bytes() if path.is_file() else b"<dir>", st.st_mode, st.st_mtime_ns if path.is_file() else 0)
    return out


# -- the state store's two engines ------------------------------------------------------------------
# A test module marked `pytestmark = pytest.mark.engines` runs each of its tests twice: on SQLite
# (state.db, runs/, audit.jsonl) and on PostgreSQL (FW_STATE: a database of its own in a throwaway
# cluster of this test process). Without PostgreSQL's binaries the second is skipped, saying why.
_CLUSTER: list = []


def pg_cluster():
    import pg

    if not _CLUSTER:
        if pg.binaries() is None:
            pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql): the PostgreSQL half is skipped")
        _CLUSTER.append(pg.Cluster())
    return _CLUSTER[0]


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("engines") and "state_engine" in metafunc.fixturenames:
        metafunc.parametrize("state_engine", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def state_engine(request):
    return getattr(request, "param", "sqlite")


def _pg_leaks(url: str) -> list[str]:
    import psycopg

    found = []
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            if any(leaked(" ".join(map(str, row))) for row in conn.execute(f'SELECT * FROM "{table}"')):
                found.append(f"table {table}")
    return found


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch, state_engine) -> Path:
    root = tmp_path / "home"
    monkeypatch.setenv("FW_HOME", str(root))
    monkeypatch.delenv("FW_JSON", raising=False)
    monkeypatch.delenv("FW_STATE", raising=False)
    database = None
    if state_engine == "postgresql":
        cluster = pg_cluster()
        database = cluster.new_database()
        monkeypatch.setenv("FW_STATE", cluster.url(database))
    result = fw("home", "init")
    assert result.exit_code == 0, result
    yield root
    if database is not None:
        from framework_cli.state.postgres import close_pools

        # nothing of the runtime state in the home's folder: it is all in the database
        kept = [p.name for p in (root / "runs").glob("*.json")] + [n for n in ("state.db", "audit.jsonl") if (root / n).exists()]
        assert not kept, f"runtime state written to the home's folder with PostgreSQL in use: {kept}"

        close_pools()
        leaks = _pg_leaks(cluster.url(database))
        cluster.drop_database(database)
        assert not leaks, f"the canary key was found in the PostgreSQL store: {leaks}"


@pytest.fixture
def sample(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "sample"
    shutil.copytree(SAMPLE_HOME, root, ignore=shutil.ignore_patterns(".index", ".index.json", ".lock", ".locks"))
    monkeypatch.setenv("FW_HOME", str(root))
    return root


# -- plugins ------------------------------------------------------------------------------------
EXAMPLE_PLUGIN = REPO / "examples" / "plugins" / "fw-example-plugin"
PLUGIN_FAKES = Path(__file__).resolve().parent / "fakes" / "plugins"


@pytest.fixture(scope="session")
def example_plugin() -> str:
    """The example plugin, installed into this test environment as a user installs a plugin
    (`.ci/run` installs it first; here it is installed once when it is missing, under a lock,
    since several test workers may ask at once). Its name, as fw knows it."""
    import fcntl

    with open(Path(sys.prefix) / ".fw-example-plugin.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        check = [sys.executable, "-c", "import importlib.metadata as m; m.distribution('fw-example-plugin')"]
        if subprocess.run(check, capture_output=True).returncode != 0:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                            "-e", str(EXAMPLE_PLUGIN)], check=True, capture_output=True, timeout=600)
    return "example"


def plugin_site(folder: Path, **entry_points: str) -> Path:
    """A folder Python imports from, holding the test plugins (tests/fakes/plugins) and the
    metadata of a distribution that declares `entry_points` (name="module:object") in group
    fw.plugins. Put it on PYTHONPATH: fw's plugin processes then find them."""
    folder.mkdir(parents=True, exist_ok=True)
    for module in PLUGIN_FAKES.glob("*.py"):
        shutil.copy(module, folder / module.name)
    info = folder / "fw_test_plugins-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fw-test-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fw.plugins]\n" + "".join(f"{name} = {target}\n" for name, target in entry_points.items()))
    return folder


@pytest.fixture
def test_plugins(tmp_path, monkeypatch) -> Path:
    """The misbehaving test plugin (`misbehaving`), where fw's plugin processes find it."""
    site = plugin_site(tmp_path / "site", misbehaving="fw_test_plugins:misbehaving")
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def make_basics(with_key: bool = True) -> None:
    """A provider (with the canary key), a model with tool calling, and an agent on it."""
    data = {"base_url": "https://llm.example.test/v1"}
    if with_key:
        data["api_key"] = CANARY
    else:
        data["api_key_env"] = "LLM_KEY"
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps(data))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
    fwj("agent", "create", "a1", "--model", "m1")


# -- processes, and the before-stop check -------------------------------------------------------
def processes_with(marker: str) -> list[str]:
    """The `ps -ww -eo pid,ppid,stat,args` (-ww: never cut to the screen width) lines of live processes whose command line holds
    `marker` (a zombie has exited: it is not one)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines()[1:] if marker in line and not line.split(None, 3)[2].startswith("Z")]


def wait_until_gone(marker: str, seconds: float = 20) -> list[str]:
    """Wait (bounded) for every process holding `marker` to go; what is still there."""
    import time

    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _become_subreaper() -> None:
    """Every process a test starts stays below this pytest process, even one that called
    `setsid` or detached itself: as a child subreaper, orphans come here, not to init. So the
    check below finds them all by reading `ps` (it also works under pytest-xdist: each worker
    checks its own)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # not Linux: the check still sees what has not been orphaned
        pass


_become_subreaper()


def _descendants() -> list[str]:
    me = os.getpid()
    listing = subprocess.Popen(["ps", "-ww", "-eo", "pid,ppid,stat,args"], stdout=subprocess.PIPE, text=True)
    out = listing.communicate()[0]
    rows = [line.split(None, 3) + [""] for line in out.splitlines()[1:]]
    children: dict[int, list[list[str]]] = {}
    for row in rows:
        children.setdefault(int(row[1]), []).append(row)
    found, todo = [], [me]
    while todo:
        for row in children.get(todo.pop(), []):
            todo.append(int(row[0]))
            if int(row[0]) != listing.pid and not row[2].startswith("Z"):
                found.append(" ".join(row[:4]).strip())
    return found


def _leftover_processes() -> list[str]:
    """Processes started by this session's tests that are still running, after a grace for
    those that are on their way out (a supervisor whose fw was killed); they are killed."""
    import signal
    import time

    deadline = time.monotonic() + 15
    while (left := _descendants()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for line in left:
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass
    return left


_HAND_WRITTEN: set[Path] = set()  # files a test itself wrote the canary into, on purpose


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "hand_written_canary(*paths): the test writes the canary into these files of its home by hand "
        "(a person's mistake fw must cope with); the before-stop check does not count them")
    config.addinivalue_line("markers", "engines: run each test on SQLite and on PostgreSQL")


@pytest.fixture(autouse=True)
def _note_hand_written_canary(request, tmp_path):
    marker = request.node.get_closest_marker("hand_written_canary")
    if marker is not None:
        _HAND_WRITTEN.update(tmp_path / "home" / rel for rel in marker.args)


def _canary_leaks(root: Path) -> list[str]:
    """Files of every test home outside secrets/, and rows of every state.db, that hold the
    canary key."""
    import sqlite3

    leaks = []
    homes = {p.parent for p in root.rglob("providers") if p.is_dir() and (p.parent / "agents").is_dir()}
    for home in sorted(homes):
        for path in home.rglob("*"):
            rel = path.relative_to(home).parts
            if rel[0] == "secrets" or not path.is_file() or path.name.startswith("state.db") or path in _HAND_WRITTEN:
                continue
            if leaked(path.read_bytes().decode("utf-8", "replace")):
                leaks.append(str(path))
    for db_path in root.rglob("state.db"):
        try:
            db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                if any(leaked(" ".join(map(str, row))) for row in db.execute(f'SELECT * FROM "{table}"')):
                    leaks.append(f"{db_path} table {table}")
            db.close()
        except sqlite3.DatabaseError:
            continue  # a test damaged it on purpose
    return leaks


@pytest.fixture(scope="session", autouse=True)
def before_stop_check(tmp_path_factory):
    """After the last test: no process a test started is left running, and the canary key is
    in no file outside secrets/ of any test home and no row of any state.db. (Outputs are
    checked by `fw` and `fw_proc` on every call.)"""
    yield
    for cluster in _CLUSTER:
        cluster.stop()
    left = _leftover_processes()
    leaks = _canary_leaks(tmp_path_factory.getbasetemp())
    assert not left, "processes started by tests were left running:\n" + "\n".join(left)
    assert not leaks, "the canary key was found in:\n" + "\n".join(leaks)
