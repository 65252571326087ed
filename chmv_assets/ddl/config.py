"""Project configuration: ``chmv.toml`` next to the DDL files, overridable from the CLI and environment."""

from __future__ import annotations

import re
import tomllib
from datetime import date
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from chmv_assets import settings
from chmv_assets.errors import DDLError, DDLProblem

CONFIG_FILE = "chmv.toml"


class LintConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_views_per_source: int = Field(default=3, description="Write-amplification budget: MVs per source table.")
    max_chain_depth: int = Field(default=3, description="Deepest MV chain before a warning.")


class ParityConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tolerance: float = Field(default=0.0, description="Allowed relative difference between target and recompute.")
    grace_minutes: int = Field(default=15, description="Processing-latency grace for the newest partition.")
    blocking: bool = Field(default=True, description="Failing parity blocks downstream materializations.")


class IngestionConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    landing_dir: str | None = Field(default=None, description="Landing zone root (Parquet by source and date).")
    late_tolerance_minutes: int = Field(default=15, description="Late-arrival window re-read below the watermark.")
    dedup_keys: dict[str, list[str]] = Field(default_factory=dict, description="Per source fqn, its dedup key.")
    time_columns: dict[str, str] = Field(default_factory=dict, description="Per source fqn, its event-time column.")
    max_lateness_minutes: int = Field(
        default=1440,
        description="Latest a landing file arrives after its rows' "
        "event time; bounds the files a partition backfill reads.",
    )


class SweepConfig(BaseModel):
    """The parity sweep (``chmv_parity_sweep``) and the recovery loop's cadence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="Run the parity sweep sensor.")
    interval_seconds: int = Field(default=60, ge=5, description="Seconds between two sweep ticks.")
    max_partitions: int = Field(default=100, ge=1, description="Most target partitions one tick evaluates.")
    max_rows: int = Field(
        default=200_000_000,
        ge=1,
        description="Most rows (source + target, estimated from "
        "system.parts) one tick's evaluations read; one partition always fits.",
    )
    recovery_interval_seconds: int = Field(default=60, ge=5, description="Seconds between two recovery ticks.")
    recovery_apply: str = Field(
        default="restore",
        pattern="^(restore|changes|never)$",
        description="DDL repairs recovery requests as runs of the chmv_apply job: 'restore' (an MV the DDL defines "
        "is missing or detached), 'changes' (also a live SELECT or TO that differs from the DDL: a pending "
        "change is applied without a human), 'never'.",
    )


class WritersConfig(BaseModel):
    """Who inserts into the source tables besides chmv (docs/writers.md).

    A source no MV writes gets ``default`` unless it is named in ``chmv`` or ``others``; a table an MV writes (a chain,
    a stream consumer's target) is written by what writes that MV's trigger, plus ``others`` if it is named there.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    default: Literal["others", "chmv"] = Field(
        default="others",
        description="others: applications, other hosts or tools may insert into a source (chmv cannot hold them, so "
        "it never swaps an open partition under them); chmv: only chmv's ingestion writes it, under the source's gate.",
    )
    chmv: tuple[str, ...] = Field(default=(), description="Sources (db.table) written only through chmv.")
    others: tuple[str, ...] = Field(default=(), description="Sources (db.table) written by others too.")
    close_after_minutes: int = Field(
        default=15,
        ge=0,
        description="How long after a window's end a row of it may still arrive from writers chmv "
        "does not control: the partition is open until then, and rebuilt only once it has closed.",
    )


class RebuildSettings(BaseModel):
    """How a rebuild stays exact under writers and other runs (docs/writers.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    race_attempts: int = Field(default=4, ge=1, description="Reads of a partition while writes keep racing it.")
    race_backoff_seconds: float = Field(
        default=1.0, ge=0, description="First wait after a raced read (doubles, with jitter, up to 30 s)."
    )
    insert_wait_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Longest wait for inserts already running "
        "into a source before a read (their blocks may not have reached the MVs yet).",
    )
    lease_ttl_seconds: float = Field(
        default=300.0,
        ge=10,
        description="How long a partition's lease lasts unless "
        "its run renews it (it renews every third of it while it runs).",
    )
    lease_wait_seconds: float = Field(
        default=60.0,
        ge=0,
        description="How long a run waits for another run's lease on a partition before it stops, naming that run.",
    )


class PacingConfig(BaseModel):
    """How every chmv insert respects the server (docs/pacing-and-health.md, "Pacing"): ingestion batches, rebuild
    fills and the apply's re-derivation are cut into inserts of at most ``max_partitions_per_insert`` partitions, each
    started only while the tables it writes stay below their part limits, the merge pool has room and fewer than
    ``max_concurrency`` chmv inserts run; "Too many parts" and lock timeouts are retried with backoff and jitter."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Pace, cut and retry chmv's inserts (false: each runs at once and whole, as before).",
    )
    parts_share: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Wait while a partition of a table an insert "
        "writes holds at least this share of its parts_to_delay_insert (the server's, or the "
        "table's SETTINGS): chmv backs off before the server delays or refuses inserts.",
    )
    pool_share: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Wait while this share of the merge pool "
        "(system.metrics BackgroundMergesAndMutationsPool*) is busy.",
    )
    pool_wait_seconds: float = Field(
        default=120.0,
        ge=0,
        description="Longest wait for a busy merge pool alone; "
        "then the insert goes ahead (the parts limits still hold it).",
    )
    max_concurrency: int = Field(
        default=0,
        ge=0,
        description="Most chmv inserts running at once on the server "
        "(system.processes); 0: background_pool_size / 2 (seed 003).",
    )
    max_partitions_per_insert: int = Field(
        default=0,
        ge=0,
        description="Most partitions one insert writes; 0: the server's max_partitions_per_insert_block.",
    )
    retry_attempts: int = Field(
        default=6,
        ge=1,
        description="Attempts of an insert refused with 'Too many parts' or "
        "a lock timeout (other errors are never retried).",
    )
    backoff_base_seconds: float = Field(
        default=2.0, ge=0, description="First pause of a wait or retry; doubles, with jitter (seed 003: 2 s)."
    )
    backoff_max_seconds: float = Field(
        default=30.0, ge=0, description="Longest pause between two looks at the server (seed 003: 30 s)."
    )
    max_wait_seconds: float = Field(
        default=1800.0,
        ge=0,
        description="Longest one insert waits for the server "
        "before the run gives up, saying why (nothing of that insert is written).",
    )


class HealthConfig(BaseModel):
    """The health checks and their sensor (docs/pacing-and-health.md, "Health checks and signals")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="Run the chmv_health sensor.")
    interval_seconds: int = Field(default=120, ge=30, description="Seconds between two looks at the server.")
    report_minutes: int = Field(
        default=60,
        ge=1,
        description="Evaluate every health check at least this often "
        "(numbers plotted over time), besides whenever a verdict changes.",
    )
    mutation_stuck_minutes: int = Field(default=30, ge=0, description="A mutation not done after this long is stuck.")
    replication_queue_warn: int = Field(default=100, ge=1, description="Replication queue entries that warn.")
    replication_queue_error: int = Field(default=1000, ge=1, description="Replication queue entries that fail.")
    replication_age_minutes: int = Field(
        default=30, ge=1, description="Age of the oldest queue entry that warns (ten times it fails)."
    )
    replica_delay_warn_seconds: int = Field(default=300, ge=1, description="Replica lag (absolute_delay) that warns.")
    replica_delay_error_seconds: int = Field(default=3600, ge=1, description="Replica lag that fails.")


class MaintenanceConfig(BaseModel):
    """Merging partitions of Replacing/Summing/Aggregating targets that received late rows, in a quiet window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="Run OPTIMIZE … PARTITION … FINAL in the quiet window.")
    window: str = Field(
        default="01:00-05:00",
        pattern=r"^([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-4]):[0-5]\d$",
        description="HH:MM-HH:MM on the server's clock (may wrap midnight: 22:00-04:00).",
    )
    closed_after_hours: int = Field(
        default=24,
        ge=0,
        description="A partition whose newest row is older than this "
        "is closed: more than one active part there means rows arrived after its merge.",
    )
    min_parts: int = Field(default=2, ge=2, description="Active parts of a closed partition that call for a merge.")
    max_partitions: int = Field(default=50, ge=1, description="Most partitions merged per window.")
    interval_seconds: int = Field(default=600, ge=60, description="Seconds between two looks at the clock.")


class ChmvConfig(BaseModel):
    """Everything chmv reads besides the DDL itself.

    Attributes:
        ddl_dir: The directory of ``.sql`` files.
        default_database: Database for unqualified names.
        external: ``db.table`` names that MVs read but that the DDL directory does not define.
        partition_start: First day of every time-window partitions definition (``YYYY-MM-DD``).
        timezone: Zone of Dagster's partition calendar (when a partition opens and closes): the zone ClickHouse
            computes the partitions in. Never written into SQL (docs/configuration.md, "Time zones").
        sla_minutes: How far a target may lag its source before the staleness sensor alerts.
        alert_webhook: URL the alert sink POSTs JSON to (besides the Dagster log).
        recovery_max_attempts: Rebuilds of one partition before recovery gives up and alerts.
        recovery_cooldown_minutes: Least time between two rebuilds of one partition.
        sweep: The parity sweep's cadence and per-tick budget.
        writers: Who inserts into the sources besides chmv.
        rebuild: Race retries and partition leases.
        pacing: How chmv's inserts wait for the server.
        health: The health checks' thresholds and cadence.
        maintenance: Merging closed partitions that received late rows.
        server_version: The version of the production server (``"24.8"``): the local twin and the embedded engine's
            sessions behave like it (its ``compatibility`` setting, and what newer engines refuse that it accepts).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ddl_dir: str
    default_database: str = "default"
    external: tuple[str, ...] = ()
    partition_start: str = "2025-01-01"
    timezone: str = "UTC"
    sla_minutes: int = 5
    alert_webhook: str | None = None
    recovery_max_attempts: int = 3
    recovery_cooldown_minutes: int = 10
    lint: LintConfig = LintConfig()
    parity: ParityConfig = ParityConfig()
    ingestion: IngestionConfig = IngestionConfig()
    sweep: SweepConfig = SweepConfig()
    writers: WritersConfig = WritersConfig()
    rebuild: RebuildSettings = RebuildSettings()
    pacing: PacingConfig = PacingConfig()
    health: HealthConfig = HealthConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    server_version: str | None = None

    @field_validator("server_version")
    @classmethod
    def _a_version(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\d+\.\d+(\.\d+)*", value):
            raise ValueError(f'{value!r} is not a ClickHouse version: write its major.minor (e.g. "24.8")')
        return value

    @field_validator("partition_start")
    @classmethod
    def _a_date(cls, value: str) -> str:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError(f'{value!r} is not a date: write it as YYYY-MM-DD (e.g. "2025-01-01")')
        try:
            date.fromisoformat(value)
        except ValueError as err:
            raise ValueError(f"{value!r} is not a date ({err})") from None
        return value

    @field_validator("timezone")
    @classmethod
    def _a_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f'{value!r} is not a time zone of the IANA database (e.g. "UTC", "Asia/Kolkata")'
            ) from None
        return value


def load_config(ddl_dir: str | Path, **overrides: object) -> ChmvConfig:
    """Read ``<ddl_dir>/chmv.toml`` (if present) and apply non-None overrides.

    Raises:
        DDLError: The file is not valid TOML or has unknown keys; the message names the file and key.
    """
    root = Path(ddl_dir).resolve()
    path = root / CONFIG_FILE
    data: dict = {}
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise DDLError(
                [
                    DDLProblem(
                        str(path),
                        getattr(err, "lineno", 1) or 1,
                        getattr(err, "colno", 1) or 1,
                        f"invalid TOML: {err}",
                        "fix the syntax of chmv.toml",
                    )
                ]
            ) from err
    data.update({k: v for k, v in overrides.items() if v is not None})
    data["ddl_dir"] = str(root)
    webhook = settings.alert_webhook()
    if webhook and "alert_webhook" not in overrides:
        data["alert_webhook"] = webhook
    try:
        return ChmvConfig(**data)
    except ValidationError as err:
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        problems = [_problem(path, text, e, overridden=set(overrides)) for e in err.errors()]
        problems.sort(key=lambda p: (p.line, p.column))
        raise DDLError(problems, where=f"in {path}; nothing was loaded") from err


def _problem(path: Path, text: str, error: ErrorDetails, *, overridden: set[str]) -> DDLProblem:
    """A validation error at the line and column of its key in chmv.toml (line 1 when the file does not set it)."""
    keys = [str(k) for k in error["loc"]]
    key = ".".join(keys)
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        hint = "remove or rename the key; the keys are those of ChmvConfig in chmv_assets/ddl/config.py (docs/configuration.md)"
    else:
        hint = f"fix the value of {key}; see ChmvConfig in chmv_assets/ddl/config.py for what it takes"
    if keys and keys[0] in overridden:
        return DDLProblem(str(path), 1, 1, f"{key} (given on the command line or by the caller): {message}", hint)
    line, column = key_position(text, keys)
    return DDLProblem(str(path), line, column, f"{key}: {message}", hint)


def key_position(text: str, keys: list[str]) -> tuple[int, int]:
    """The 1-based line and column where ``keys`` (``["sweep", "interval_seconds"]``) is set in TOML ``text``.

    The key's own line (or the line of the inline table holding it), else the header of its deepest table, else
    ``(1, 1)``.
    """
    best, depth = (1, 1), 0
    table: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        header = re.fullmatch(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?", raw)
        if header:
            table = [_unquote(k) for k in re.findall(r'"[^"]*"|[^.\s]+', header.group(1))]
            if depth < len(table) <= len(keys) and keys[: len(table)] == table:
                best, depth = (number, raw.index("[") + 1), len(table)
            continue
        assigned = re.match(r'\s*("[^"]*"|[A-Za-z0-9_-]+)\s*=', raw)
        if assigned:
            name = [*table, _unquote(assigned.group(1))]
            if keys[: len(name)] == name:
                return number, assigned.start(1) + 1
    return best


def _unquote(key: str) -> str:
    key = key.strip()
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key
