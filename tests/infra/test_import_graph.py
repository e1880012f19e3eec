"""The layer's import graph has no circle: no module of `headwater` reaches itself through
its imports (TYPE_CHECKING imports included: a cycle there is still two modules that cannot
be read, moved or tested apart), and no top-level part (`headwater.<x>`: a package such as
`headwater.durable`, or a module such as `headwater.services`) reaches itself through the
others. The contracts of `.importlinter` (test_import_contracts.py) say which arrows may run
where; this checks that whatever they allow, none runs in a circle. The graph is grimp's,
the library import-linter is built on."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grimp

ROOT = "headwater"


def strongly_connected(
    nodes: Iterable[str], successors: Callable[[str], Iterable[str]]
) -> list[list[str]]:
    """The cycles of a directed graph: its strongly connected components of more than one
    node, and single nodes with an edge to themselves, each sorted, in a stable order.
    Tarjan's algorithm with an explicit stack (no recursion, whatever the graph's depth)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(successors(root))))]
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(successors(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in successors(node):
                        found.append(sorted(component))
    return sorted(found)


def top_level(module: str) -> str:
    """The part of the layer a module belongs to: `headwater.<x>`."""
    return ".".join(module.split(".")[:2])


def module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    return strongly_connected(graph.modules, graph.find_modules_directly_imported_by)


def part_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """The graph between the layer's top-level parts: an arrow wherever one of a part's
    modules imports one of another's."""
    edges: dict[str, set[str]] = {top_level(m): set() for m in graph.modules}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if top_level(imported) != top_level(module):
                edges[top_level(module)].add(top_level(imported))
    return edges


def part_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    edges = part_edges(graph)
    return strongly_connected(edges, lambda part: edges[part])


def import_lines(
    graph: grimp.ImportGraph, within: list[str], by_part: bool = False
) -> dict[tuple[str, str], list[str]]:
    """The import statements that make up a cycle, per arrow: each import from one member of
    `within` to another (members are modules, or top-level parts when `by_part`, and then
    only the imports crossing from one part to another), as `importer:line: statement`."""
    members = set(within)
    key = top_level if by_part else (lambda m: m)
    out: dict[tuple[str, str], list[str]] = {}
    for importer in sorted(graph.modules):
        if key(importer) not in members:
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if key(imported) not in members or (by_part and key(imported) == key(importer)):
                continue
            lines = out.setdefault((key(importer), key(imported)), [])
            for d in graph.get_import_details(importer=importer, imported=imported) or [
                {"line_number": "?", "line_contents": f"(imports {imported})"}
            ]:
                lines.append(f"{importer}:{d['line_number']}: {d['line_contents']}")
    return out


def report(graph: grimp.ImportGraph, cycles: list[list[str]], by_part: bool = False) -> str:
    """Each cycle with its arrows, the thinnest first (the likeliest to be the wrong way
    round), each arrow with its import lines."""
    out = ["import cycles:"]
    for cycle in cycles:
        out.append(f"  {' <-> '.join(cycle)}:")
        arrows = import_lines(graph, cycle, by_part)
        for (importer, imported), lines in sorted(arrows.items(), key=lambda a: len(a[1])):
            out.append(f"    {importer} -> {imported} ({len(lines)} imports):")
            out.extend(f"      {line}" for line in lines)
    return "\n".join(out)


def layer_graph() -> grimp.ImportGraph:
    return grimp.build_graph(ROOT, exclude_type_checking_imports=False, cache_dir=None)


def test_no_module_of_the_layer_imports_itself_through_others() -> None:
    graph = layer_graph()
    assert len(graph.modules) > 100  # the whole layer, not a stub
    cycles = module_cycles(graph)
    assert not cycles, report(graph, cycles)


def test_no_top_level_part_of_the_layer_imports_itself_through_others() -> None:
    graph = layer_graph()
    edges = part_edges(graph)
    assert "headwater.durable" in edges["headwater.index"]  # the graph has arrows to check
    cycles = part_cycles(graph)
    assert not cycles, report(graph, cycles, by_part=True)


def _add(graph: grimp.ImportGraph, importer: str, imported: str, line: int) -> None:
    graph.add_import(
        importer=importer,
        imported=imported,
        line_number=line,
        line_contents=f"from {imported.rsplit('.', 1)[0]} import {imported.rsplit('.', 1)[1]}",
    )


def test_the_check_finds_cycles_and_names_their_import_lines() -> None:
    graph = grimp.ImportGraph()
    # parts a and b import each other, though no module reaches itself
    _add(graph, "pkg.a.x", "pkg.b.y", 3)
    _add(graph, "pkg.b.z", "pkg.a.w", 7)
    # a three-module cycle inside part c, entered from a
    _add(graph, "pkg.a.x", "pkg.c.one", 4)
    _add(graph, "pkg.c.one", "pkg.c.two", 1)
    _add(graph, "pkg.c.two", "pkg.c.three", 1)
    _add(graph, "pkg.c.three", "pkg.c.one", 2)
    # a ring far deeper than Python's recursion limit, inside part d
    ring = [f"pkg.d.m{i:05}" for i in range(5000)]
    for i, module in enumerate(ring):
        _add(graph, module, ring[(i + 1) % len(ring)], 1)
    # and no cycle along a chain
    _add(graph, "pkg.e.p", "pkg.e.q", 1)
    _add(graph, "pkg.e.q", "pkg.a.x", 1)

    assert module_cycles(graph) == [["pkg.c.one", "pkg.c.three", "pkg.c.two"], sorted(ring)]
    assert part_cycles(graph) == [["pkg.a", "pkg.b"]]
    message = report(graph, part_cycles(graph), by_part=True)
    assert "pkg.a <-> pkg.b" in message
    assert "pkg.a -> pkg.b (1 imports)" in message
    assert "pkg.a.x:3: from pkg.b import y" in message
    assert "pkg.b.z:7: from pkg.a import w" in message
    assert "pkg.c" not in message  # a's import of c is not part of the cycle
    message = report(graph, module_cycles(graph)[:1])
    assert "pkg.c.three:2: from pkg.c import one" in message


def test_a_module_importing_itself_is_a_cycle() -> None:
    edges = {"a": {"a"}, "b": {"c"}, "c": set()}
    assert strongly_connected(edges, lambda n: edges[n]) == [["a"]]
