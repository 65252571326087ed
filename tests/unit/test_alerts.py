"""The alert sink against a real HTTP server on 127.0.0.1: delivery, retries, a dead endpoint that never blocks."""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from chmv_assets.alerts import Alert, AlertSink


class _Receiver(BaseHTTPRequestHandler):
    received: list[dict] = []
    fail_first = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.fail_first > 0:
            cls.fail_first -= 1
            self.send_response(503)
        else:
            cls.received.append(body)
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    handler = type("Handler", (_Receiver,), {"received": [], "fail_first": 0})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()


def test_webhook_receives_the_alert_as_json(receiver) -> None:
    handler, url = receiver
    sink = AlertSink(url)
    sink.send(
        Alert(
            "check_failed",
            "error",
            "analytics.error_events",
            "partition 2026-08-03 lost 7 rows",
            {"partition": "2026-08-03", "delta": -7},
        )
    )
    assert sink.flush(5)
    (body,) = handler.received
    assert body["kind"] == "check_failed" and body["subject"] == "analytics.error_events"
    assert body["details"] == {"partition": "2026-08-03", "delta": -7} and body["source"] == "chmv"


def test_webhook_retries_after_server_errors(receiver) -> None:
    handler, url = receiver
    handler.fail_first = 2
    sink = AlertSink(url, attempts=3, backoff_seconds=0.01)
    sink.send(Alert("stale", "warning", "analytics.audit_log", "lags 12 min"))
    assert sink.flush(5)
    assert len(handler.received) == 1 and sink.delivered == 1


def test_dead_endpoint_never_blocks_the_caller() -> None:
    """An endpoint that takes the connection and never answers: every send returns while the first delivery is still
    stuck (nothing delivered, nothing failed yet), then each alert fails within its budget."""
    with socket.socket() as silent:  # listens, never accepts: the kernel completes the handshake, nobody answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        sink = AlertSink(f"http://127.0.0.1:{port}/hook", attempts=3, backoff_seconds=0.05, budget_seconds=1.0)
        for i in range(5):
            sink.send(Alert("recovery_exhausted", "error", "analytics.x", f"alert {i}"))
        assert (sink.delivered, sink.failed) == (0, 0)  # send waited for no delivery
        assert sink.flush(15)
        assert sink.failed == 5 and sink.delivered == 0


def test_log_only_sink_logs(caplog) -> None:
    sink = AlertSink(None)
    with caplog.at_level("WARNING", logger="chmv.alerts"):
        sink.send(Alert("check_warned", "warning", "analytics.t", "climbing parts"))
    assert "check_warned analytics.t: climbing parts" in caplog.text


def test_a_failed_delivery_logs_no_part_of_the_webhooks_secret(caplog) -> None:
    with socket.socket() as s:  # a port nobody listens on: urllib3's error names the URL it tried
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://bot:pw@127.0.0.1:{port}/services/T0001/B0002/XyZsecret?token=t0k3n"
    sink = AlertSink(url, attempts=2, backoff_seconds=0.01, budget_seconds=1.0)
    with caplog.at_level("ERROR", logger="chmv.alerts"):
        sink.send(Alert("stale", "warning", "analytics.t", "lags"))
        assert sink.flush(10)
    assert sink.failed == 1
    assert f"alert webhook http://127.0.0.1:{port}/… gave up on stale for analytics.t" in caplog.text
    for secret in ("XyZsecret", "T0001", "t0k3n", "services", "pw@", "bot"):
        assert secret not in caplog.text
    assert "XyZsecret" not in repr(sink)


SECRET_PATH = "/services/T0001/B0002/XyZsecret"


def _urllib3_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("urllib3")]


@pytest.fixture(autouse=True)
def _urllib3_logs(monkeypatch) -> None:
    """urllib3's loggers as a fresh process has them: a module loaded earlier in the same test process may have
    configured logging with ``disable_existing_loggers`` (Dagster does), which would silence the very records these
    tests read."""
    for name in ("urllib3", "urllib3.connectionpool", "urllib3.util.retry"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "disabled", False)
        monkeypatch.setattr(logger, "level", logging.NOTSET)
        monkeypatch.setattr(logger, "propagate", True)


def test_urllib3s_retry_logs_never_show_the_webhooks_secret_path(receiver, caplog) -> None:
    """A webhook answering 503: urllib3 retries and logs each retry with the URL it requested (the path and query are
    the secret of a chat webhook); every record, at every level, shows them redacted."""
    handler, url = receiver
    handler.fail_first = 10
    secret_url = url.replace("/hook", SECRET_PATH) + "?token=t0k3n"
    sink = AlertSink(secret_url, attempts=3, backoff_seconds=0.01, budget_seconds=2.0)
    with caplog.at_level(logging.DEBUG):
        sink.send(Alert("stale", "warning", "analytics.t", "lags"))
        assert sink.flush(10)
    assert sink.failed == 1 and handler.fail_first == 7  # three attempts, each answered 503
    retries = [r for r in _urllib3_records(caplog) if "Retry" in r.getMessage()]
    assert retries, "urllib3 logged no retry: this test proves nothing"
    for record in caplog.records:
        for secret in ("XyZsecret", "T0001", "t0k3n"):
            assert secret not in record.getMessage(), (record.name, record.getMessage())


def test_urllib3s_retry_warnings_of_a_refused_connection_show_no_secret(caplog) -> None:
    """A port nobody listens on: urllib3 warns "Retrying … after connection broken by …: <url>" at each retry."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink = AlertSink(f"http://127.0.0.1:{port}{SECRET_PATH}?token=t0k3n", attempts=2, backoff_seconds=0.01)
    with caplog.at_level(logging.WARNING):
        sink.send(Alert("stale", "warning", "analytics.t", "lags"))
        assert sink.flush(10)
    assert any("Retrying" in r.getMessage() for r in _urllib3_records(caplog)), "no retry warning: proves nothing"
    for secret in ("XyZsecret", "T0001", "t0k3n"):
        assert secret not in caplog.text


def test_the_process_wide_sink_of_a_webhook_is_built_without_deadlocking() -> None:
    """``sink_for`` builds a sink under its lock, and a sink registers its webhook with the log redaction: two locks,
    never one taken twice (a sweep or sensor built with a webhook hung there)."""
    from chmv_assets.alerts import sink_for

    built: list[AlertSink] = []
    worker = threading.Thread(target=lambda: built.append(sink_for("http://127.0.0.1:9/hooks/s3cr3t")), daemon=True)
    worker.start()
    worker.join(10)
    assert built, "sink_for did not return within 10 s"
    assert sink_for("http://127.0.0.1:9/hooks/s3cr3t") is built[0]
