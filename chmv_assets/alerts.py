"""The alert sink: every alert goes to the Dagster log, and to a webhook (JSON POST) when one is configured.

Webhook delivery runs on a background daemon thread with short timeouts, a few retries (urllib3's ``Retry``:
connection errors and 5xx answers, exponential backoff, ``Retry-After`` ignored) and a bounded total time per
alert, so a dead endpoint never blocks a check, a sensor tick or a run. What urllib3 logs meanwhile (its retry
warnings, its debug lines) names the URL it requested: a filter on its loggers redacts every sink's webhook there.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import HTTPError, LocationParseError
from urllib3.util import Retry, parse_url

_LOG = logging.getLogger("chmv.alerts")


@dataclass(frozen=True)
class Alert:
    """One alert.

    Attributes:
        kind: ``check_failed``, ``check_warned``, ``stale``, ``recovery``, ``recovery_exhausted``, ``recovery_refused``,
            ``recovery_held`` (a pending change or a DDL repair comes first), ``drift``.
        severity: ``info``, ``warning`` or ``error``.
        subject: The object concerned (``db.table``), or ``chmv``.
        message: One readable sentence: what is wrong and what happens next.
        details: JSON-serializable figures (partition, expected, actual, lag…).
    """

    kind: str
    severity: str
    subject: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """The JSON body POSTed to the webhook."""
        return {"source": "chmv", "at": datetime.now(UTC).isoformat(), **asdict(self)}


class AlertSink:
    """Send alerts to the log (always) and to an optional webhook (in the background).

    Args:
        webhook: URL to POST JSON to; None logs only.
        timeout_seconds: Timeout of one HTTP attempt (lowered when the attempts would not fit the budget).
        attempts: Attempts per alert (connection errors and 5xx answers are retried).
        backoff_seconds: Backoff factor of urllib3's ``Retry``: the first retry follows at once, the next ones
            after 2, 4, … times this.
        budget_seconds: Most time spent delivering one alert, all attempts and pauses included.
    """

    def __init__(
        self,
        webhook: str | None,
        *,
        timeout_seconds: float = 2.0,
        attempts: int = 3,
        backoff_seconds: float = 0.2,
        budget_seconds: float = 8.0,
    ):
        self.webhook = webhook
        self.attempts = attempts
        self.backoff_seconds = backoff_seconds
        self.budget_seconds = budget_seconds
        # urllib3 bounds each attempt, not the sum: split what the pauses leave of the budget between the attempts.
        pauses = sum(backoff_seconds * 2**n for n in range(1, attempts - 1))
        self.timeout_seconds = max(0.05, min(timeout_seconds, (budget_seconds - pauses) / attempts))
        self.delivered = 0
        self.failed = 0
        self._http = urllib3.PoolManager(
            retries=Retry(
                total=attempts - 1,
                allowed_methods=None,  # POST too: a lost alert costs more than a duplicate one
                status_forcelist=range(500, 600),
                backoff_factor=backoff_seconds,
                backoff_max=budget_seconds,
                respect_retry_after_header=False,  # a server's Retry-After must not stretch the budget
                raise_on_status=False,
            ),
            timeout=urllib3.Timeout(total=self.timeout_seconds),
            maxsize=1,
        )
        if webhook:
            _redact_in_urllib3_logs(webhook)
        self._queue: queue.Queue[Alert] = queue.Queue(maxsize=1000)
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()

    def send(self, alert: Alert, log: Any | None = None) -> None:
        """Log the alert and queue it for the webhook; returns at once and never raises."""
        logger = log or _LOG
        line = f"[chmv alert] {alert.severity.upper()} {alert.kind} {alert.subject}: {alert.message}"
        (logger.error if alert.severity == "error" else logger.warning if alert.severity == "warning" else logger.info)(
            line
        )
        if not self.webhook:
            return
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.failed += 1
            _LOG.warning("alert queue full: dropped %s for %s", alert.kind, alert.subject)
            return
        self._ensure_worker()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued alert was delivered or given up; True when the queue drained in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return self._queue.unfinished_tasks == 0

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="chmv-alerts", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            alert = self._queue.get()
            try:
                if self._deliver(alert):
                    self.delivered += 1
                else:
                    self.failed += 1
            finally:
                self._queue.task_done()

    def _deliver(self, alert: Alert) -> bool:
        body = json.dumps(alert.payload(), default=str).encode()
        try:
            response = self._http.request(
                "POST", self.webhook or "", body=body, headers={"Content-Type": "application/json"}
            )
        except (HTTPError, ValueError) as err:
            error = scrub(str(err), self.webhook)
            _LOG.error(
                "alert webhook %s gave up on %s for %s after %d attempts: %s",
                *(self.shown_webhook, alert.kind, alert.subject, self.attempts, error),
            )
            return False
        if 200 <= response.status < 300:
            return True
        what = (self.shown_webhook, alert.kind, alert.subject, self.attempts, response.status)
        _LOG.error("alert webhook %s gave up on %s for %s after %d attempts: HTTP %d", *what)
        return False

    @property
    def shown_webhook(self) -> str:
        """The webhook URL as logs show it: its scheme and host only (the path and query are often the secret)."""
        return redact_url(self.webhook or "")

    def __repr__(self) -> str:
        return f"AlertSink({self.shown_webhook or None})"


def redact_url(url: str) -> str:
    """``https://hooks.slack.com/services/T0/B0/secret?token=x`` → ``https://hooks.slack.com/…``: what is safe to log.

    Chat webhooks carry their secret in the path (Slack, Discord) or the query (a token); user and password may be
    in the host part. Only the scheme, host and port are kept.
    """
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    hidden = "/…" if (parts.path not in ("", "/") or parts.query or "@" in parts.netloc) else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


def scrub(text: str, url: str | None) -> str:
    """``text`` (an exception's message) without the secret parts of ``url``: its path, query and credentials (as
    written, and as urllib3 requests them)."""
    if not url:
        return text
    parts = urlsplit(url)
    secrets = [parts.path, parts.query, parts.username, parts.password, url]
    try:
        sent = parse_url(url)
        secrets += [sent.request_uri, sent.path, sent.query, sent.url]
    except LocationParseError:
        pass
    for secret in sorted({s for s in secrets if s and s != "/"}, key=len, reverse=True):
        text = text.replace(secret, "…")
    return text


#: urllib3's loggers whose records can name a requested URL (a filter on a logger sees only its own records).
_URLLIB3_LOGGERS = ("urllib3.connectionpool", "urllib3.poolmanager", "urllib3.util.retry", "urllib3.connection")


class _RedactWebhooks(logging.Filter):
    """Rewrites a urllib3 record whose text holds a secret part of a webhook URL (formatted, then scrubbed)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        urls = list(self.urls)
        if not urls:
            return True
        text = clean = record.getMessage()
        for url in urls:
            clean = scrub(clean, url)
        if clean != text:
            record.msg, record.args = clean, None
        return True


_redactor = _RedactWebhooks()
#: Its own lock: :func:`sink_for` builds a sink (which registers its webhook here) under ``_sinks_lock``.
_redactor_lock = threading.Lock()


def _redact_in_urllib3_logs(webhook: str) -> None:
    """Redact ``webhook``'s secret parts in what urllib3 logs (the filter is installed once per process)."""
    with _redactor_lock:
        _redactor.urls.add(webhook)
        for name in _URLLIB3_LOGGERS:
            logger = logging.getLogger(name)
            if _redactor not in logger.filters:
                logger.addFilter(_redactor)


_sinks: dict[str | None, AlertSink] = {}
_sinks_lock = threading.Lock()


def sink_for(webhook: str | None) -> AlertSink:
    """The process-wide sink of a webhook URL (one delivery thread per URL)."""
    with _sinks_lock:
        if webhook not in _sinks:
            _sinks[webhook] = AlertSink(webhook)
        return _sinks[webhook]
