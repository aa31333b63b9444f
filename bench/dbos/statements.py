"""Counts the statements and transactions a database's sessions send to Postgres,
from the server's own log, for the DBOS benchmark's statements per step.

The throwaway server of scripts/with-postgres writes its log to
``server.log`` beside its data directory. For the counting pass the log's
line prefix is made to name the database and the backend
(``ALTER SYSTEM``, reloaded), and ``log_statement = 'all'`` is set on the
counted databases only, so the measured rounds log nothing. A transaction
is a BEGIN ... COMMIT block, or a statement run outside one (its own
implicit transaction; an empty statement, as a pool's liveness check sends,
starts none); pg_stat_statements would need a server restart.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Optional

PREFIX = "%m [%p] db=%d "
LINE = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] db=(\S*) LOG:  (?:statement|execute [^:]*): (.*)$")


class StatementLog:
    """The server's log file, with the statement prefix set while open."""

    def __init__(self, url: str, path: str):
        self.url = url
        self.path = path

    @classmethod
    def open(cls, url: str) -> Optional["StatementLog"]:
        """The log of the server at `url` when it is a file on this machine
        beside the data directory (as scripts/with-postgres makes it), else None."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as c:
            data = c.execute("SELECT current_setting('data_directory')").fetchone()[0]
            path = os.path.join(os.path.dirname(data), "server.log")
            if not os.access(path, os.R_OK):
                return None
            c.execute(f"ALTER SYSTEM SET log_line_prefix = '{PREFIX}'")
            c.execute("SELECT pg_reload_conf()")
        return cls(url, path)

    @staticmethod
    def enable_for(url: str, db: str) -> None:
        """Logs every statement of the database's new sessions."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f"ALTER DATABASE \"{db}\" SET log_statement = 'all'")

    def offset(self) -> int:
        return os.path.getsize(self.path)

    def count(self, start: int, db: str) -> Dict[str, Any]:
        """The statements and transactions of database `db` logged past `start`,
        and each statement's count by its first words."""
        with open(self.path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        statements = transactions = 0
        in_block: Dict[str, bool] = {}
        by_statement: Dict[str, int] = {}
        for line in text.splitlines():
            m = LINE.match(line)
            if not m or m.group(2) != db:
                continue
            pid, sql = m.group(1), m.group(3).strip()
            word = sql.split(None, 1)[0].upper().rstrip(";") if sql else ""
            statements += 1
            key = " ".join(sql.split())[:90]
            by_statement[key] = by_statement.get(key, 0) + 1
            if word in ("BEGIN", "START"):
                in_block[pid] = True
            elif word in ("COMMIT", "END"):
                transactions += 1
                in_block[pid] = False
            elif word == "ROLLBACK":
                in_block[pid] = False
            elif word and not in_block.get(pid):
                transactions += 1
        return {"statements": statements, "transactions": transactions, "by_statement": by_statement}

    def close(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET log_line_prefix")
            c.execute("SELECT pg_reload_conf()")
