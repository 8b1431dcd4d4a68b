"""The store's schema and its forward migrations (one list of statements per version).

Both backends run the same statements: the SQL sticks to what SQLite and
PostgreSQL share (`TEXT`, `BIGINT`, `DOUBLE PRECISION`, `ON CONFLICT`,
`RETURNING`). Version rows live in `kedi_schema`, one per component (`kedi`
for these tables; other features add their own with `Store.extend_schema`).

Version 1:

- `sessions`: one row per conversation: `id` (the conversation id), `name`
  (unique, NULL for unnamed runs), `program`, `model`, `parent` (the session
  it was forked from), `created`/`updated` (Unix seconds), `turns` (the
  counter that numbers turns: bumped inside each turn's transaction, which
  also serializes concurrent writers of one session on PostgreSQL).
- `runs`: one row per run of a session: `run_no`, `program`, `started`,
  `finished`, `status` (`running`, `ok`, `failed`, `interrupted`), `failure`
  (JSON: error text, location, stage, lane key, partial messages, usage).
- `turns`: one row per model call: `seq` (order in the session), `run_no`,
  `lane` (the canonical lane-key JSON), `history` (1 when committed to the
  lane), `epoch`, `run_id`, `origin` (`file:line`), `request` (the rendered
  request, JSON), `messages` (the turn in the lane's format, JSON),
  `rewritten` (a processor's replacement of the prior lane, JSON or NULL),
  `value` (the call's result, JSON), `usage`, `exchanges` (transcript
  records, each holding the messages its request added and a reference to
  the exchange it repeats: `kedi.history.store.exchanges`), `created`.
"""

from __future__ import annotations

COMPONENT = "kedi"

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS sessions (
            id TEXT PRIMARY KEY,
            name TEXT UNIQUE,
            program TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            parent TEXT,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            turns BIGINT NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE IF NOT EXISTS runs (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            run_no BIGINT NOT NULL,
            program TEXT NOT NULL DEFAULT '',
            started DOUBLE PRECISION NOT NULL,
            finished DOUBLE PRECISION,
            status TEXT NOT NULL,
            failure TEXT,
            PRIMARY KEY (session_id, run_no)
        )""",
        """CREATE TABLE IF NOT EXISTS turns (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            run_no BIGINT NOT NULL,
            lane TEXT NOT NULL,
            history BIGINT NOT NULL,
            epoch BIGINT NOT NULL,
            run_id TEXT NOT NULL DEFAULT '',
            origin TEXT NOT NULL DEFAULT '',
            request TEXT NOT NULL,
            messages TEXT NOT NULL,
            rewritten TEXT,
            value TEXT,
            usage TEXT NOT NULL,
            exchanges TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        "CREATE INDEX IF NOT EXISTS sessions_updated ON sessions (updated)",
    ],
}
"""Forward migrations: version → statements that upgrade the version before it."""

LATEST = max(MIGRATIONS)
