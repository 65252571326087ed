"""The graph of tables, dictionaries and MVs of a project: order, depth, impact, rendering."""

from __future__ import annotations

import json
import re
from collections import deque
from functools import cached_property
from graphlib import CycleError, TopologicalSorter

from chmv_assets.ddl.models import SERVER_DATABASES, MaterializedView, ObjectRef, Project, Table, TriggerLoop


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


def strongly_connected(upstream: dict[str, set[str]]) -> list[set[str]]:
    """The loops of a graph given as ``node → what it depends on``: its strongly connected parts of more than one node,
    and single nodes with an edge to themselves (Tarjan's algorithm, iterative), in a deterministic order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(upstream):
        if root in index:
            continue
        work = [(root, iter(sorted(upstream.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(upstream.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.add(member)
                        if member == node:
                            break
                    if len(part) > 1 or node in upstream.get(node, ()):
                        found.append(part)
    return found


def trigger_loops(project: Project) -> tuple[list[TriggerLoop], list[set[str]]]:
    """The real loops of the project's trigger edges: per strongly connected part holding MVs, a
    :class:`~chmv_assets.ddl.models.TriggerLoop` (one cycle through it, from the first MV's trigger, and its MVs in
    file order); and the parts without an MV (tables only: nothing to leave out)."""
    graph = LineageGraph(project)
    loops, bare = [], []
    for part in graph.trigger_loops:
        views = sorted(
            (v for v in project.views.values() if v.ref.fqn in part),
            key=lambda v: (v.location.file, v.location.line, v.location.column),
        )
        if not views:
            bare.append(part)
            continue
        loops.append(TriggerLoop(cycle=tuple(_cycle_through(graph, part, views[0])), views=tuple(views)))
    loops.sort(key=lambda loop: (loop.views[0].location.file, loop.views[0].location.line))
    return loops, bare


def _cycle_through(graph: LineageGraph, part: set[str], view: MaterializedView) -> list[str]:
    """A shortest cycle through ``view`` inside ``part``, in data-flow order, starting at its trigger."""
    down: dict[str, list[str]] = {}
    for node in part:
        for up in graph.upstream.get(node, ()):
            if up in part:
                down.setdefault(up, []).append(node)
    start = view.trigger.fqn if view.trigger is not None and view.trigger.fqn in part else view.ref.fqn
    parents: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(down.get(node, ())):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]
            if nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    return [start, start]


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
    (:meth:`find_cycle`): each insert would fire the MVs again, and the server refuses every insert into it; the
    loader leaves such a loop's MVs out of the project (:attr:`Project.loops`), and the graph draws them marked.

    A refreshable MV's ``DEPENDS ON`` is a **dependency** (:attr:`depends`): it orders the graph where it can, drawn
    dotted, never a trigger.
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
                elif source in project.dictionaries:  # a Dictionary table: created after its dictionary
                    reads.append((source, ref, "dictionary"))
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
            for used in view.dictionaries:
                reads.append((used, ref, "dictionary"))
            if view.target is not None:
                self._edge(ref, view.target, "table")
        callers = [(k.ref.fqn if k.ref else k.name, k.functions) for k in project.kept if k.functions]
        callers += [(ref.fqn, view.functions) for ref, view in project.views.items()]
        for caller, called in callers:
            for name in called:
                if name in functions and name != caller:
                    self.upstream[caller].add(name)
        #: The strongly connected parts of the trigger edges: each a real loop (load_project leaves its MVs out).
        self.trigger_loops: list[set[str]] = strongly_connected(self.upstream)
        loop = bool(self.trigger_loops)  # no order to keep
        down: dict[str, set[str]] = {}
        for node, ups in self.upstream.items():
            for up in ups:
                down.setdefault(up, set()).add(node)
        #: ``(what it DEPENDS ON, the refreshable MV)``: it refreshes after them (never an insert, never a trigger).
        self.depends: set[tuple[str, str]] = set()
        for view in project.views.values():
            for other in view.depends_on:
                reads.append((other, view.ref, "depends"))
        for source, reader, kind in reads:
            if kind == "depends":
                self.depends.add((source.fqn, reader.fqn))
                if source in project.loop_views:  # drawn to the loop's MV, which orders nothing
                    continue
            self._node(source, "table" if kind == "depends" else kind)
            if loop or _reaches(down, reader.fqn, source.fqn):
                if kind != "depends":  # a DEPENDS ON against the flow orders nothing; it is drawn all the same
                    self.feedback.add((source.fqn, reader.fqn))
            else:
                self.upstream[reader.fqn].add(source.fqn)
                down.setdefault(source.fqn, set()).add(reader.fqn)
        #: The trigger loops the loader left out of the project (:class:`~chmv_assets.ddl.models.TriggerLoop`), and
        #: their edges ``(from, to)``: drawn, marked, outside :attr:`upstream`.
        self.loops: tuple[TriggerLoop, ...] = project.loops
        self.loop_edges: set[tuple[str, str]] = set()
        for view in project.loop_views.values():
            if view.trigger is not None:
                self.loop_edges.add((view.trigger.fqn, view.ref.fqn))
            self.loop_edges.add((view.ref.fqn, view.writes_to.fqn))

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

    @cached_property
    def ordered_depends(self) -> set[tuple[str, str]]:
        """The ``DEPENDS ON`` edges that order the graph (in :attr:`upstream`; one against the flow does not)."""
        return {(d, v) for d, v in self.depends if d in self.upstream.get(v, ())}

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
                "depends_on": [d.fqn for d in v.depends_on],
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
        loops = [
            {
                "cycle": list(loop.cycle),
                "views": [
                    {
                        "name": v.ref.fqn,
                        "trigger": v.trigger.fqn if v.trigger else None,
                        "target": v.writes_to.fqn,
                        "location": str(v.location),
                    }
                    for v in loop.views
                ],
                "problem": str(loop.problem()),
            }
            for loop in self.loops
        ]
        return {
            "views": views,
            "tables": tables,
            "functions": functions,
            "kept": kept,
            "layers": self.layers,
            "loops": loops,
        }

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
        loop_views = sorted(r.fqn for r in self.project.loop_views)
        ids |= {n: f"n{len(ids) + i}" for i, n in enumerate(loop_views)}
        lines = ["flowchart LR"]
        for node, kind in sorted(self.kinds.items()):
            lines.append(f"    {ids[node]}" + shape[kind] % f'"{node}"')
        for node in loop_views:  # an MV of a trigger loop: left out of the project, drawn and marked
            lines.append(f"    {ids[node]}" + shape["view"] % f'"{node} (trigger loop: not loaded)"' + ":::loop")
        for node in sorted(self.upstream):
            for up in sorted(self.upstream[node]):
                arrow = "-.->|depends on|" if (up, node) in self.depends else "-->"
                lines.append(f"    {ids[up]} {arrow} {ids[node]}")
        for up, node in sorted(self.feedback):  # a read against the flow: never fires the MV
            lines.append(f"    {ids[up]} -.->|reads| {ids[node]}")
        for up, node in sorted(self.depends - self.ordered_depends):
            lines.append(f"    {ids[up]} -.->|depends on| {ids[node]}")
        for up, node in sorted(self.loop_edges):
            lines.append(f"    {ids[up]} ==>|loop| {ids[node]}")
        if loop_views:
            lines.append("    classDef loop stroke:#d00,stroke-width:3px")
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
        for node in sorted(r.fqn for r in self.project.loop_views):
            lines.append(f'    "{node}" [shape=diamond, color=red, xlabel="trigger loop: not loaded"];')
        for node in sorted(self.upstream):
            for up in sorted(self.upstream[node]):
                style = ' [style=dotted, label="depends on"]' if (up, node) in self.depends else ""
                lines.append(f'    "{up}" -> "{node}"{style};')
        for up, node in sorted(self.feedback):  # a read against the flow: never fires the MV
            lines.append(f'    "{up}" -> "{node}" [style=dashed, label="reads"];')
        for up, node in sorted(self.depends - self.ordered_depends):
            lines.append(f'    "{up}" -> "{node}" [style=dotted, label="depends on"];')
        for up, node in sorted(self.loop_edges):
            lines.append(f'    "{up}" -> "{node}" [color=red, label="loop"];')
        lines.append("}")
        return "\n".join(lines)
