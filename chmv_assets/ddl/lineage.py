"""The graph of tables, dictionaries and MVs of a project: order, depth, impact, rendering."""

from __future__ import annotations

import json
import re
from collections import deque
from functools import cached_property
from graphlib import CycleError, TopologicalSorter

from chmv_assets.ddl.models import SERVER_DATABASES, MaterializedView, ObjectRef, Project, Table


def merged_tables(project: Project, table: Table) -> list[ObjectRef]:
    """The tables of the project a ``Merge(db, 'regexp')`` table reads: those of ``db`` whose names match."""
    engine = table.engine
    if engine is None or engine.name != "Merge" or len(engine.arguments) < 2:
        return []
    database = engine.arguments[0].strip("'`\"")
    if database.replace(" ", "").lower() in ("currentdatabase()", "current_database()"):
        database = table.ref.database
    try:
        pattern = re.compile(engine.arguments[1].strip("'"))
    except re.error:
        return []
    return [r for r in project.tables if r.database == database and r != table.ref and pattern.search(r.name)]


def _reaches(down: dict[str, set[str]], start: str, goal: str) -> bool:
    """``goal`` is ``start`` or downstream of it."""
    seen, queue = {start}, [start]
    while queue:
        node = queue.pop()
        if node == goal:
            return True
        for nxt in down.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return False


#: Engines an insert goes through to the table they name (an MV on that table fires).
_WRITE_THROUGH = frozenset({"Distributed", "Buffer"})
#: Node kinds that are not a step of the data flow: an MV reading them is no deeper than its other sources.
_LOOKUPS = frozenset({"dictionary", "function"})


class LineageGraph:
    """Dependency graph over ``database.name`` nodes; edges point from what is read to what reads it.

    Edges: source table → MV, dictionary → MV, a dictionary's source table → dictionary, MV → TO target, a plain
    view's tables → the view (an MV reading the view reads them), a SQL function → the MVs, views and functions that
    call it. An MV with an inner table is its own target. A function's node is its name (no database).

    Only a **trigger edge** fires: an insert into an MV's trigger runs the MV, which inserts into its target (and an
    insert into a Buffer or Distributed table reaches the table below). Every other source of an MV (a JOIN, an IN, a
    subquery, a dictionary) is a read: it orders the graph where it can, but a read of the MV's own target or of a
    table downstream of it (the dedup or feedback pattern) is a **feedback read** (:attr:`feedback`), kept out of
    :attr:`upstream`: an insert into that table never fires the MV. A loop of trigger edges is a real loop
    (:meth:`find_cycle`): each insert would fire the MVs again, and the server refuses every insert into it.
    """

    def __init__(self, project: Project):
        self.project = project
        self.kinds: dict[str, str] = {}
        self.upstream: dict[str, set[str]] = {}
        #: Reads an MV makes that go against the flow: ``(what it reads, the MV)``, outside :attr:`upstream`.
        self.feedback: set[tuple[str, str]] = set()
        reads: list[tuple[ObjectRef, ObjectRef, str]] = []  # (source, MV, source kind): added once the flow is known
        for ref in project.tables:
            self._node(ref, "table")
        for ref, table in project.tables.items():  # a table over others: Distributed, Buffer, Merge, AS other
            through = table.engine is not None and table.engine.name in _WRITE_THROUGH
            for source in (*table.reads, *merged_tables(project, table), *([table.as_table] if table.as_table else ())):
                if source != ref and (source in project.tables or source in project.views):
                    if through and source in table.reads:  # an insert into it reaches the table below
                        self._edge(source, ref, "table")
                    else:
                        reads.append((source, ref, "table"))
        for ref in project.external:
            self._node(ref, "external")
        for ref, dictionary in project.dictionaries.items():
            self._node(ref, "dictionary")
            if dictionary.source_table is not None:
                self._edge(dictionary.source_table, ref, "table")
        functions = project.functions
        for name in functions:
            self.kinds.setdefault(name, "function")
            self.upstream.setdefault(name, set())
        for ref in project.plain_views:
            self._node(ref, "plain_view")
        for ref, plain in project.plain_views.items():
            for source in plain.reads:
                self._edge(source, ref, "table")
        for ref, view in project.views.items():
            self._node(ref, "view")
            for source in view.source_refs:
                if source == view.trigger and not view.refreshable:  # a refreshable MV fires on its schedule
                    self._edge(source, ref, "table")
                else:
                    reads.append((source, ref, "table"))
            for dictionary in view.dictionaries:
                reads.append((dictionary, ref, "dictionary"))
            if view.target is not None:
                self._edge(ref, view.target, "table")
        callers = [(k.ref.fqn if k.ref else k.name, k.functions) for k in project.kept if k.functions]
        callers += [(ref.fqn, view.functions) for ref, view in project.views.items()]
        for caller, called in callers:
            for name in called:
                if name in functions and name != caller:
                    self.upstream[caller].add(name)
        loop = self.find_cycle() is not None  # a real loop: no order to keep (load_project refuses it)
        down: dict[str, set[str]] = {}
        for node, ups in self.upstream.items():
            for up in ups:
                down.setdefault(up, set()).add(node)
        for source, view, kind in reads:
            self._node(source, kind)
            if loop or _reaches(down, view.fqn, source.fqn):
                self.feedback.add((source.fqn, view.fqn))
            else:
                self.upstream[view.fqn].add(source.fqn)
                down.setdefault(source.fqn, set()).add(view.fqn)

    def _node(self, ref: ObjectRef, kind: str) -> None:
        self.kinds.setdefault(ref.fqn, "external" if ref.database in SERVER_DATABASES else kind)
        self.upstream.setdefault(ref.fqn, set())

    def _edge(self, src: ObjectRef, dst: ObjectRef, src_kind: str) -> None:
        self._node(src, src_kind)
        self._node(dst, "table")
        self.upstream[dst.fqn].add(src.fqn)

    @cached_property
    def downstream(self) -> dict[str, set[str]]:
        down: dict[str, set[str]] = {n: set() for n in self.upstream}
        for node, ups in self.upstream.items():
            for up in ups:
                down[up].add(node)
        return down

    def find_cycle(self) -> list[str] | None:
        """The nodes of one cycle in data-flow order (``a -> mv -> b -> … -> a``), first node repeated at the end.

        None for a DAG.
        """
        try:
            tuple(TopologicalSorter(self.upstream).static_order())
        except CycleError as err:
            # graphlib lists each node before one of its predecessors; report in data-flow order.
            cycle = list(err.args[1])
            return cycle[::-1] if cycle[1] in self.upstream[cycle[0]] else cycle
        return None

    @cached_property
    def layers(self) -> list[list[str]]:
        """Topological layers: every node's dependencies sit in earlier layers (deploy order, parallel groups)."""
        sorter = TopologicalSorter(self.upstream)
        sorter.prepare()
        layers = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready())
            layers.append(ready)
            sorter.done(*ready)
        return layers

    @cached_property
    def depth(self) -> dict[str, int]:
        """MV hops from a root table: a root source is 0, a target written by an MV on it is 1, and so on."""
        depth: dict[str, int] = {}
        for layer in self.layers:
            for node in layer:
                ups = self.upstream[node]
                if self.kinds[node] == "view":
                    depth[node] = 1 + max((depth[u] for u in ups if self.kinds[u] not in _LOOKUPS), default=0)
                else:
                    depth[node] = max((depth[u] for u in ups), default=0)
        return depth

    def view_depth(self, view: MaterializedView) -> int:
        return self.depth[view.ref.fqn]

    def impact(self, fqn: str) -> list[str]:
        """Everything downstream of a node (breadth-first, the node itself excluded)."""
        seen, queue, order = {fqn}, deque([fqn]), []
        while queue:
            for nxt in sorted(self.downstream.get(queue.popleft(), ())):
                if nxt not in seen:
                    seen.add(nxt)
                    order.append(nxt)
                    queue.append(nxt)
        return order

    def to_dict(self) -> dict:
        """The JSON shape of ``chmv lineage --format json``."""
        views = [
            {
                "name": v.ref.fqn,
                "target": v.target.fqn if v.target else None,
                "sources": [r.fqn for r in v.source_refs],
                "trigger": v.trigger.fqn if v.trigger else None,
                "dictionaries": [d.fqn for d in v.dictionaries],
                "feedback_reads": sorted(s for s, m in self.feedback if m == v.ref.fqn),
                "refreshable": v.refreshable,
                "depth": self.view_depth(v),
                "functions": sorted(n for n in self.upstream[v.ref.fqn] if self.kinds.get(n) == "function"),
            }
            for v in self.project.views.values()
        ]
        tables = [
            {"name": n, "kind": k, "depth": self.depth[n], "downstream": self.impact(n)}
            for n, k in sorted(self.kinds.items())
            if k not in ("view", "function")
        ]
        functions = [
            {"name": n, "downstream": self.impact(n)} for n, k in sorted(self.kinds.items()) if k == "function"
        ]
        kept = [{"kind": str(k.kind), "name": k.name, "location": str(k.location)} for k in self.project.kept]
        return {"views": views, "tables": tables, "functions": functions, "kept": kept, "layers": self.layers}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_mermaid(self) -> str:
        """A ``flowchart LR`` with tables as cylinders, dictionaries as hexagon-less boxes, MVs as diamonds."""
        ids = {n: f"n{i}" for i, n in enumerate(sorted(self.kinds))}
        shape = {
            "view": "{{%s}}",
            "dictionary": "[/%s/]",
            "external": "[(%s)]",
            "table": "[(%s)]",
            "plain_view": "[[%s]]",
            "function": "(%s)",
        }
        lines = ["flowchart LR"]
        for node, kind in sorted(self.kinds.items()):
            lines.append(f"    {ids[node]}" + shape[kind] % f'"{node}"')
        for node in sorted(self.upstream):
            for up in sorted(self.upstream[node]):
                lines.append(f"    {ids[up]} --> {ids[node]}")
        for up, node in sorted(self.feedback):  # a read against the flow: never fires the MV
            lines.append(f"    {ids[up]} -.->|reads| {ids[node]}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz DOT, one node per object, MVs as diamonds."""
        shape = {
            "view": "diamond",
            "dictionary": "component",
            "external": "cylinder",
            "table": "cylinder",
            "plain_view": "box",
            "function": "ellipse",
        }
        lines = ["digraph chmv {", "    rankdir=LR;"]
        for node, kind in sorted(self.kinds.items()):
            lines.append(f'    "{node}" [shape={shape[kind]}];')
        for node in sorted(self.upstream):
            for up in sorted(self.upstream[node]):
                lines.append(f'    "{up}" -> "{node}";')
        for up, node in sorted(self.feedback):  # a read against the flow: never fires the MV
            lines.append(f'    "{up}" -> "{node}" [style=dashed, label="reads"];')
        lines.append("}")
        return "\n".join(lines)
