"""A rebuild run's hold on the engine: the write gates of the target's triggers, then one client.

A run observes, plans, takes its leases, fills and swaps, and verifies what it rebuilt on the one client of its hold,
taken once (:mod:`chmv_assets.engine.rebuild.executor`). The lock order is fixed (docs/rebuilds.md): the gates first,
then the engine; a hold is released whole and taken again whole. A run lets it go only where it must not keep it:
while Spark stages landing rows, while it waits for room on the server (pacing) or for a partition another run
holds; it takes it again after.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from clickhouse_connect.driver.client import Client

from chmv_assets.ddl.models import ObjectRef
from chmv_assets.engine.clients import ClientFactory
from chmv_assets.engine.ingest.cutoff import source_gate


class RunHold:
    """The gates of ``gates`` and one client opened after them, held until released.

    Args:
        clickhouse: Opens the client (and clients of its own for what runs without the hold); None with ``client``.
        gates: The sources whose write gates the hold takes.
        holder: What the run does, written beside the gates for those who wait for them.
        client: A client the caller opened, whose gates the caller holds (``chmv apply``, the repair of a load): the
            hold is that client, never released here.
    """

    def __init__(
        self,
        clickhouse: ClientFactory | None,
        gates: Sequence[ObjectRef],
        holder: str,
        *,
        client: Client | None = None,
    ):
        if client is None and clickhouse is None:
            raise ValueError("a run's hold needs a client factory or an open client")
        self.clickhouse = clickhouse
        self.gates = tuple(gates)
        self.holder = holder
        self.given = client is not None
        self._client = client
        self._stack: ExitStack | None = None
        self._gates: ExitStack | None = None

    @property
    def held(self) -> bool:
        return self._client is not None

    @property
    def client(self) -> Client:
        """The hold's client, the hold taken again first if it was released."""
        self.take()
        assert self._client is not None
        return self._client

    def take(self) -> None:
        """The gates, then a client (nothing if held)."""
        if self._client is not None:
            return
        assert self.clickhouse is not None
        stack, gates = ExitStack(), ExitStack()
        try:
            stack.enter_context(gates)
            gates.enter_context(source_gate(self.gates, holder=self.holder))
            self._client = stack.enter_context(self.clickhouse.get_client())
        except BaseException:
            stack.close()
            raise
        self._stack, self._gates = stack, gates

    def release(self) -> None:
        """The client, then the gates (a caller's client is kept)."""
        if self.given or self._stack is None:
            return
        stack, self._stack, self._gates, self._client = self._stack, None, None, None
        stack.close()

    def release_gates(self) -> None:
        """The gates only: the client stays open for what runs after the swaps (never taken back: the gates come
        before the engine)."""
        if self._gates is not None:
            self._gates.close()
            self._gates = None

    @contextmanager
    def get_client(self, *, lock_timeout_seconds: float | None = None) -> Iterator[Client]:
        """The hold's client where it is held, else a client of its own (no gates): a client factory for what a run
        does around its reads and swaps (records, leases)."""
        if self._client is not None:
            yield self._client
            return
        assert self.clickhouse is not None
        with self.clickhouse.get_client(lock_timeout_seconds=lock_timeout_seconds) as client:
            yield client

    def __enter__(self) -> RunHold:
        self.take()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
