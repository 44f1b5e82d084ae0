"""The schema of `state.db`, as named migrations applied in order (never edited once released:
a change is a new migration at the end)."""

from __future__ import annotations

MIGRATIONS: list[tuple[str, list[str]]] = [
    (
        "0001_sessions_messages_turns_memory",
        [
            """CREATE TABLE sessions (
                name TEXT PRIMARY KEY,
                title TEXT,
                status TEXT NOT NULL DEFAULT 'open',
                created_by TEXT NOT NULL,
                created_at TEXT NOT NULL,
                ended_at TEXT
            )""",
            """CREATE TABLE members (
                session TEXT NOT NULL REFERENCES sessions (name),
                principal TEXT NOT NULL,
                joined_at TEXT NOT NULL,
                PRIMARY KEY (session, principal)
            )""",
            """CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session TEXT NOT NULL REFERENCES sessions (name),
                author TEXT NOT NULL,
                text TEXT NOT NULL,
                mentions TEXT NOT NULL,
                hop INTEGER NOT NULL,
                run_id TEXT,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX messages_by_session ON messages (session, id)",
            """CREATE TABLE turns (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session TEXT NOT NULL REFERENCES sessions (name),
                message_id INTEGER NOT NULL REFERENCES messages (id),
                principal TEXT NOT NULL,
                status TEXT NOT NULL,
                hop INTEGER NOT NULL,
                run_id TEXT,
                error TEXT,
                created_at TEXT NOT NULL,
                started_at TEXT,
                ended_at TEXT
            )""",
            "CREATE INDEX turns_by_status ON turns (status, id)",
            """CREATE TABLE memory (
                principal TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (principal, key)
            )""",
        ],
    ),
    (
        "0002_tasks",
        [
            """CREATE TABLE tasks (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                principal TEXT NOT NULL,
                instructions TEXT NOT NULL,
                session TEXT,
                created_by TEXT NOT NULL,
                created_run TEXT,
                status TEXT NOT NULL,
                result TEXT,
                error TEXT,
                run_id TEXT,
                created_at TEXT NOT NULL,
                started_at TEXT,
                ended_at TEXT
            )""",
            "CREATE INDEX tasks_by_status ON tasks (status, id)",
        ],
    ),
]
