"""The environment chmv reads: every variable named once here, with its default, its type and what it means.

Each value is read when it is asked for (a call), never at import: a test or a process that sets a variable sees it
on the next call. An empty variable counts as unset. Relative defaults are taken from the current working directory
(where ``make demo``, ``dagster dev`` and ``chmv`` run), never from where chmv is installed: an installed chmv keeps
its state next to the project that uses it, not in ``site-packages``.

docs/configuration.md ("Environment variables") lists the same variables (``tests/unit/test_settings.py`` keeps
the two together).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variable:
    """One environment variable chmv reads.

    Attributes:
        name: The variable's name.
        default: What applies when it is unset, as docs/configuration.md says it.
        doc: What it sets.
    """

    name: str
    default: str
    doc: str

    def get(self) -> str | None:
        """The variable's value now; None when it is unset or empty."""
        return os.environ.get(self.name) or None


STATE_DIR = Variable(
    "CHMV_STATE_DIR",
    "./.chmv",
    "Local state: the embedded engine (chdb/), the parse cache, the sources' write gates, staging, the demo's "
    "landing zone.",
)
DDL_DIR = Variable(
    "CHMV_DDL_DIR",
    "./ddl; in a checkout of chmv without one, ./examples/ddl",
    "The DDL directory of the workspace code location (chmv_assets.definitions).",
)
CLICKHOUSE_DSN = Variable(
    "CHMV_CLICKHOUSE_DSN",
    "the embedded engine, chdb://<state dir>/chdb",
    "The code location's and the CLI's ClickHouse: http(s)://host:port[/database] or chdb:///path (--dsn wins).",
)
CLICKHOUSE_USER = Variable(
    "CLICKHOUSE_USER", "the DSN's user, or none", "Server user of the code location and the CLI (passed as EnvVar)."
)
CLICKHOUSE_PASSWORD = Variable(
    "CLICKHOUSE_PASSWORD",
    "the DSN's password, or none",
    "Server password of the code location and the CLI (passed as EnvVar; the UI shows the name only).",
)
LANDING_DIR = Variable(
    "CHMV_LANDING_DIR",
    "<state dir>/landing if it exists",
    "The Parquet landing zone when chmv.toml has no [ingestion] landing_dir (relative: to the DDL directory).",
)
STAGING_DIR = Variable(
    "CHMV_STAGING_DIR",
    "<state dir>/staging",
    "Where Spark stages rows for ClickHouse to read (on a server: a directory the server reads).",
)
ALERT_WEBHOOK = Variable(
    "CHMV_ALERT_WEBHOOK",
    "chmv.toml's alert_webhook, or none",
    "Alerts as a JSON POST to this URL (wins over chmv.toml).",
)
PARSE_CACHE = Variable("CHMV_PARSE_CACHE", "1", "0 parses the DDL directory every time, without the parse cache.")
SPARK_MASTER = Variable("CHMV_SPARK_MASTER", "local[*]", "spark.master of chmv's Spark session (spark://host:7077…).")
CRASH_AT = Variable(
    "CHMV_CRASH_AT", "none", "Tests only: comma-separated crash points at which the process kills itself (SIGKILL)."
)

#: Every variable chmv reads, in the order docs/configuration.md lists them.
VARIABLES = (
    DDL_DIR,
    STATE_DIR,
    CLICKHOUSE_DSN,
    CLICKHOUSE_USER,
    CLICKHOUSE_PASSWORD,
    LANDING_DIR,
    STAGING_DIR,
    ALERT_WEBHOOK,
    PARSE_CACHE,
    SPARK_MASTER,
    CRASH_AT,
)


def state_dir() -> Path:
    """``$CHMV_STATE_DIR``, else ``.chmv`` in the current working directory (absolute)."""
    return Path(STATE_DIR.get() or ".chmv").resolve()


def ddl_dir() -> Path:
    """``$CHMV_DDL_DIR``, else ``./ddl``; in a checkout of chmv (no ``./ddl``, an ``./examples/ddl``), the example.

    A ``./ddl`` that does not exist is returned as such: loading it says no MV was found and how to point chmv at
    the DDL.
    """
    configured = DDL_DIR.get()
    if configured:
        return Path(configured).resolve()
    own, example = Path("ddl").resolve(), Path("examples", "ddl").resolve()
    return example if not own.is_dir() and example.is_dir() else own


def clickhouse_dsn() -> str | None:
    """``$CHMV_CLICKHOUSE_DSN``; None: the embedded engine under :func:`state_dir`."""
    return CLICKHOUSE_DSN.get()


#: Query parameters of a DSN whose value is a secret: a token (``access_token``), a password, a key, a signature.
_SECRET_PARAMETER = re.compile(r"token|passw|secret|key|jwt|auth|cred|sig", re.IGNORECASE)


def redact_dsn(dsn: str) -> str:
    """``dsn`` as it may be shown (logs, messages, metadata, a command to copy): no ``user:password@``, and the value
    of every secret query parameter hidden; the rest as written.

    ``https://u:pw@host:8443/db?access_token=x&connect_timeout=3``
    → ``https://host:8443/db?access_token=…&connect_timeout=3``.
    """
    head, has_query, query = dsn.partition("?")
    scheme, slashes, rest = head.partition("://")
    if slashes:
        authority, slash, path = rest.partition("/")
        head = f"{scheme}://{authority.rsplit('@', 1)[-1]}{slash}{path}"
    if not has_query:
        return head
    shown = []
    for parameter in query.split("&"):
        name, has_value, value = parameter.partition("=")
        shown.append(f"{name}=…" if has_value and value and _SECRET_PARAMETER.search(name) else parameter)
    return f"{head}?{'&'.join(shown)}"


def landing_dir() -> Path | None:
    """``$CHMV_LANDING_DIR`` as given (a relative path is the DDL directory's to resolve); None when unset."""
    configured = LANDING_DIR.get()
    return Path(configured) if configured else None


def staging_dir() -> Path:
    """``$CHMV_STAGING_DIR``, else ``<state dir>/staging`` (absolute)."""
    return Path(STAGING_DIR.get() or state_dir() / "staging").resolve()


def alert_webhook() -> str | None:
    """``$CHMV_ALERT_WEBHOOK``; None when unset."""
    return ALERT_WEBHOOK.get()


def parse_cache() -> bool:
    """Whether the DDL's parse cache is used: yes unless ``$CHMV_PARSE_CACHE`` is ``0``."""
    return PARSE_CACHE.get() != "0"


def spark_master() -> str:
    """``$CHMV_SPARK_MASTER``, else ``local[*]``."""
    return SPARK_MASTER.get() or "local[*]"


def crash_points() -> frozenset[str]:
    """The crash points ``$CHMV_CRASH_AT`` names (tests); empty when unset."""
    return frozenset(point for point in (CRASH_AT.get() or "").split(",") if point)
