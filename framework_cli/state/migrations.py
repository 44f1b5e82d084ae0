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

# The local chat platform (framework_cli/platform/adapters/local.py): one small platform per
# local bot, every row keyed by the bot's name.
MIGRATIONS.append(
    (
        "0003_local_platform",
        [
            """CREATE TABLE local_bots (
                bot TEXT PRIMARY KEY,
                online INTEGER NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE local_users (
                bot TEXT NOT NULL,
                id TEXT NOT NULL,
                name TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (bot, id)
            )""",
            """CREATE TABLE local_friends (
                bot TEXT NOT NULL,
                user_id TEXT NOT NULL,
                remark TEXT,
                created_at TEXT NOT NULL,
                PRIMARY KEY (bot, user_id)
            )""",
            """CREATE TABLE local_groups (
                bot TEXT NOT NULL,
                id TEXT NOT NULL,
                name TEXT NOT NULL,
                joined INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (bot, id)
            )""",
            """CREATE TABLE local_members (
                bot TEXT NOT NULL,
                group_id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                joined_at TEXT NOT NULL,
                PRIMARY KEY (bot, group_id, user_id)
            )""",
            """CREATE TABLE local_mutes (
                bot TEXT NOT NULL,
                group_id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                until TEXT NOT NULL,
                PRIMARY KEY (bot, group_id, user_id)
            )""",
            """CREATE TABLE local_messages (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                bot TEXT NOT NULL,
                id TEXT NOT NULL,
                chat_type TEXT NOT NULL,
                chat_id TEXT NOT NULL,
                sender TEXT,
                text TEXT NOT NULL,
                deleted INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                UNIQUE (bot, id)
            )""",
            """CREATE TABLE local_friend_requests (
                bot TEXT NOT NULL,
                id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                status TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (bot, id)
            )""",
            """CREATE TABLE local_group_invites (
                bot TEXT NOT NULL,
                id TEXT NOT NULL,
                group_id TEXT NOT NULL,
                inviter TEXT NOT NULL,
                status TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (bot, id)
            )""",
            """CREATE TABLE local_actions (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                bot TEXT NOT NULL,
                api TEXT NOT NULL,
                params TEXT NOT NULL,
                error TEXT,
                time TEXT NOT NULL
            )""",
            "CREATE INDEX local_actions_by_bot ON local_actions (bot, seq)",
        ],
    )
)

MIGRATIONS.append(("0004_task_hops", ["ALTER TABLE tasks ADD COLUMN hop INTEGER NOT NULL DEFAULT 0"]))

# Work in progress carries its owner: the dispatcher that claimed it (`owner`, a row of
# `dispatchers`, whose `heartbeat_at` it renews while it lives) and how many claims it has
# had (`attempts`, which also tells one claim from the next). Plain columns and timestamps, so
# any SQL store can tell a live owner from a dead one.
MIGRATIONS.append(
    (
        "0005_work_owners_and_heartbeats",
        [
            """CREATE TABLE dispatchers (
                id TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                process TEXT NOT NULL,
                started_at TEXT NOT NULL,
                heartbeat_at TEXT NOT NULL
            )""",
            "ALTER TABLE turns ADD COLUMN owner TEXT",
            "ALTER TABLE turns ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE tasks ADD COLUMN owner TEXT",
            "ALTER TABLE tasks ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
        ],
    )
)

# The reverse WebSockets of onebot bots (framework_cli/platform/adapters/onebot.py): one row a
# bot and process holding a socket of it, refreshed while it is held, so that any fw process
# can tell whether the bot is connected (a row not refreshed for a minute was left by a process
# that died).
MIGRATIONS.append(
    (
        "0006_onebot_links",
        [
            """CREATE TABLE onebot_links (
                bot TEXT NOT NULL,
                owner TEXT NOT NULL,
                online INTEGER NOT NULL,
                self_id TEXT,
                connected_at TEXT NOT NULL,
                seen_at TEXT NOT NULL,
                PRIMARY KEY (bot, owner)
            )""",
        ],
    )
)

# What `fw bot serve` keeps of each onebot bot (framework_cli/platform/adapters/onebot.py): the
# reports it has seen (de-duplication for a day, the last 100,000 a bot), the messages the bot
# sent (a reply to one addresses the bot), and its own id and heartbeats (online while they
# come; offline when three intervals pass without one).
MIGRATIONS.append(
    (
        "0007_onebot_reports_and_heartbeats",
        [
            """CREATE TABLE onebot_seen (
                bot TEXT NOT NULL,
                key TEXT NOT NULL,
                seen_at TEXT NOT NULL,
                PRIMARY KEY (bot, key)
            )""",
            "CREATE INDEX onebot_seen_by_time ON onebot_seen (bot, seen_at)",
            """CREATE TABLE onebot_sent (
                bot TEXT NOT NULL,
                message_id TEXT NOT NULL,
                sent_at TEXT NOT NULL,
                PRIMARY KEY (bot, message_id)
            )""",
            """CREATE TABLE onebot_status (
                bot TEXT PRIMARY KEY,
                self_id TEXT,
                last_event_at TEXT,
                last_heartbeat_at TEXT,
                heartbeat_seconds REAL,
                heartbeat_online INTEGER,
                served_by TEXT,
                served_at TEXT
            )""",
        ],
    )
)

# The conversations of explicit runs (`fw agent run NAME`), which `fw agent run NAME --continue`
# carries on: one row a conversation, one row a message of it (fw's conversation form: role,
# content, tool calls; never a model's reasoning). Not sessions: those are between principals.
MIGRATIONS.append(
    (
        "0008_explicit_agent_conversations",
        [
            """CREATE TABLE conversations (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE INDEX conversations_by_agent ON conversations (agent, updated_at)",
            """CREATE TABLE conversation_messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                conversation INTEGER NOT NULL REFERENCES conversations (id),
                run_id TEXT NOT NULL,
                message TEXT NOT NULL,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX conversation_messages_by_conversation ON conversation_messages (conversation, id)",
        ],
    )
)

# Lanes (framework_cli/runtime/lanes.py): one row a principal (its turns and tasks) and a
# conversation (a bot's event runs in one group, or with one person), held by the process that
# runs its work, for a lease it renews, with a fence number that each new holder raises. And the
# events `fw bot serve` took, waiting for their run in the store (never dropped when the runs
# in flight reach the bound), in the order they came, a conversation's one after another.
MIGRATIONS.append(
    (
        "0009_lanes_and_bot_events",
        [
            """CREATE TABLE lanes (
                lane TEXT PRIMARY KEY,
                owner TEXT,
                lease_until TEXT,
                fence INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX lanes_by_owner ON lanes (owner)",
            """CREATE TABLE bot_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                bot TEXT NOT NULL,
                conversation TEXT NOT NULL,
                principal TEXT NOT NULL,
                event TEXT NOT NULL,
                status TEXT NOT NULL,
                received_at TEXT NOT NULL,
                owner TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                run_id TEXT,
                error TEXT,
                started_at TEXT,
                ended_at TEXT
            )""",
            "CREATE INDEX bot_events_by_status ON bot_events (status, id)",
            "CREATE INDEX bot_events_by_bot ON bot_events (bot, status, id)",
        ],
    )
)

# With PostgreSQL every host sees every run and every audit line, so both live in the store; with
# SQLite they stay in runs/ and audit.jsonl, and these tables stay empty (`fw state copy` fills
# them when it moves a home over, and empties them back into the files).
MIGRATIONS.append(
    (
        "0010_runs_and_audit",
        [
            """CREATE TABLE runs (
                run_id TEXT PRIMARY KEY,
                record TEXT NOT NULL
            )""",
            """CREATE TABLE audit (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                line TEXT NOT NULL
            )""",
        ],
    )
)

# The reverse WebSocket of a OneBot bot is held by one process at a time, its owner (with an
# epoch that grows with each new holder); actions of runs in other processes (on other hosts,
# with PostgreSQL) reach the bot through the owner's outbox, answered in order.
MIGRATIONS.append(
    (
        "0011_onebot_owner_and_outbox",
        [
            """CREATE TABLE onebot_owner (
                bot TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                epoch INTEGER NOT NULL,
                seen_at TEXT NOT NULL
            )""",
            """CREATE TABLE onebot_outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                bot TEXT NOT NULL,
                action TEXT NOT NULL,
                params TEXT NOT NULL,
                status TEXT NOT NULL,
                epoch INTEGER,
                answer TEXT,
                error TEXT,
                asked_by TEXT NOT NULL,
                asked_at TEXT NOT NULL,
                answered_at TEXT
            )""",
            "CREATE INDEX onebot_outbox_waiting ON onebot_outbox (bot, status, id)",
        ],
    )
)
