"""Imports point inward only: every import in src/quotaflow, importlib strings followed, against the layer order.

Layers, lowest first; a module may import its own package and any package on a lower layer, never one on its
own layer (sideways) or above (up). ``quotaflow/__init__.py`` (the version) is below everything. On top of the
order, the graph of what loads what (imports inside functions included) has no cycle, inside a package either.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import quotaflow

SRC: Final = Path(quotaflow.__file__).parent
ROOT: Final = "quotaflow"

# lowest first; packages and top-level modules of src/quotaflow. A new one must be placed here (see the test below).
LAYERS: Final[tuple[frozenset[str], ...]] = (
    frozenset({"core"}),
    frozenset({"engine"}),
    frozenset({"store"}),
    frozenset({"admin", "events", "brokerconfig"}),
    frozenset({"gateway", "pipeline", "console"}),
    frozenset({"cli"}),
    frozenset({"conformance"}),
    frozenset({"testing"}),  # the broker/gateway process harness of tests, bench and the demo
    frozenset({"demo"}),  # runs real brokers and gateways through testing/
)
LAYER_OF: Final = {name: i for i, layer in enumerate(LAYERS) for name in layer}
_MODULE_PATH: Final = re.compile(r"quotaflow(?:\.\w+)+")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: Final = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _existing(name: str) -> str | None:
    """The longest prefix of a dotted name that is a quotaflow module (``pkg.mod.attr`` -> ``pkg.mod``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (annotations only, never executed)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def _import_module_args(tree: ast.AST) -> set[int]:
    """ids of the string constants passed to ``importlib.import_module`` / ``__import__`` (they load a module)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__"):
                found.add(id(node.args[0]))
    return found


def imports_of(module: str) -> Iterator[tuple[int, str, bool]]:
    """(line, imported quotaflow module, loads it) for every import statement and every module path in a string
    literal (``importlib.import_module("quotaflow.x")``, ``"quotaflow.cli.report:report"``, f-string prefixes,
    ``[sys.executable, "-m", "quotaflow.cli.main"]``).

    All count for the layers. ``loads it`` (an edge of the load-cycle check) is True for import statements outside
    ``TYPE_CHECKING``, ``import_module`` arguments and ``"module:attr"`` strings (lazy loading); False for a bare
    module path (a child process's ``-m``) and an f-string prefix (``f"quotaflow.conformance.{m}"`` names some
    module of that package, not its ``__init__``)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = _type_checking_nodes(tree)
    imported_by_name = _import_module_args(tree)
    for node in ast.walk(tree):
        targets: list[str] = []
        loads = id(node) not in typing_only
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = _MODULE_PATH.fullmatch(node.value.partition(":")[0])
            targets = [m.group(0)] if m else []
            loads = loads and (id(node) in imported_by_name or ":" in node.value)
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            prefix = str(node.values[0].value)
            m = _MODULE_PATH.fullmatch(prefix.rstrip("."))
            targets = [m.group(0)] if m and prefix.endswith(".") else []
            loads = False
        for target in targets:
            found = _existing(target) if target.startswith(ROOT + ".") else None
            if found is not None and found != module:
                yield getattr(node, "lineno", 0), found, loads


def area(module: str) -> str:
    """``quotaflow.gateway.server`` -> ``gateway``; ``quotaflow.events`` -> ``events``; the root -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_area_has_a_layer() -> None:
    areas = {area(m) for m in MODULES} - {""}
    assert not areas - set(LAYER_OF), f"place these in LAYERS: {sorted(areas - set(LAYER_OF))}"


def wrong_imports(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    """``module:line imports target (up|sideways)`` for every import that does not point to a lower layer."""
    wrong = []
    for module, imported in graph.items():
        here = area(module)
        if here not in LAYER_OF:
            continue
        for line, target in imported:
            there = area(target)
            if there in ("", here):
                continue
            if there not in LAYER_OF or LAYER_OF[there] >= LAYER_OF[here]:
                way = "sideways" if LAYER_OF.get(there) == LAYER_OF[here] else "up"
                wrong.append(f"{module}:{line} imports {target} ({way})")
    return wrong


def test_imports_point_inward() -> None:
    graph = {m: [(line, t) for line, t, _ in imports_of(m)] for m in MODULES}
    wrong = wrong_imports(graph)
    assert not wrong, "\n".join(wrong)


def test_wrong_imports_flags_up_and_sideways() -> None:
    graph = {
        "quotaflow.engine.rate": [(3, "quotaflow.gateway.server"), (4, "quotaflow.core.keys")],
        "quotaflow.gateway.server": [(5, "quotaflow.pipeline.job"), (6, "quotaflow.gateway.config")],
        "quotaflow.cli.main": [(7, "quotaflow.admin.wire"), (8, "quotaflow.testing.tansu")],
    }
    assert wrong_imports(graph) == [
        "quotaflow.engine.rate:3 imports quotaflow.gateway.server (up)",
        "quotaflow.gateway.server:5 imports quotaflow.pipeline.job (sideways)",
        "quotaflow.cli.main:8 imports quotaflow.testing.tansu (up)",
    ]


# inside gateway/: its planes and the shell that wires them (server, listener). Lowest, ``wire/`` (Kafka's wire
# format: frame facts, kafka-python glue, refusals as Kafka builds them) imports nothing else of the gateway; ``config``
# (the settings) sits below the planes. The data plane calls auth, never back: auth/ imports neither data/ nor
# ``context`` (the interface a connection sees, which names the data plane's types). observation/ only records.
# A module inside the first package must not import the second (a module or a package) unless the target is inside
# the first too.
GATEWAY: Final = "quotaflow.gateway"
PLANE_RULES: Final[tuple[tuple[str, str, str], ...]] = (
    (f"{GATEWAY}.data", f"{GATEWAY}.server", "a plane imports the shell"),
    (f"{GATEWAY}.data", f"{GATEWAY}.listener", "a plane imports the shell"),
    (f"{GATEWAY}.auth", f"{GATEWAY}.server", "a plane imports the shell"),
    (f"{GATEWAY}.auth", f"{GATEWAY}.listener", "a plane imports the shell"),
    (f"{GATEWAY}.auth", f"{GATEWAY}.data", "the data plane calls auth, never back"),
    (f"{GATEWAY}.auth", f"{GATEWAY}.context", "the data plane calls auth, never back"),
    (f"{GATEWAY}.observation", GATEWAY, "observation only records"),
    (f"{GATEWAY}.wire", GATEWAY, "the wire format sits below both planes"),
)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def wrong_plane_imports(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    """``module:line imports target (why)`` for every import inside gateway/ that breaks a rule of PLANE_RULES."""
    wrong = []
    for module, imported in graph.items():
        for line, target in imported:
            for importer, forbidden, why in PLANE_RULES:
                if _inside(module, importer) and _inside(target, forbidden) and not _inside(target, importer):
                    wrong.append(f"{module}:{line} imports {target} ({why})")
                    break
    return wrong


def test_gateway_planes_point_inward() -> None:
    graph = {m: [(line, t) for line, t, _ in imports_of(m)] for m in MODULES}
    wrong = wrong_plane_imports(graph)
    assert not wrong, "\n".join(wrong)


def test_wrong_plane_imports_flags_each_rule() -> None:
    graph = {
        "quotaflow.gateway.data.framing": [(1, "quotaflow.gateway.server"), (2, "quotaflow.gateway.auth.sasl")],
        "quotaflow.gateway.auth.tls": [(3, "quotaflow.gateway.data.pending"), (4, "quotaflow.gateway.wire.protocol"),
                                       (5, "quotaflow.gateway.config")],
        "quotaflow.gateway.auth.authorize": [(6, "quotaflow.gateway.context"), (7, "quotaflow.gateway.data")],
        "quotaflow.gateway.observation.eventlog": [(8, "quotaflow.gateway.config"),
                                                   (9, "quotaflow.gateway.observation.ratelog")],
        "quotaflow.gateway.wire.protocol": [(10, "quotaflow.gateway.wire.frame_facts"),
                                            (11, "quotaflow.gateway.auth.hidden_topics")],
        "quotaflow.gateway.server": [(12, "quotaflow.gateway.data.connection")],
    }
    assert wrong_plane_imports(graph) == [
        "quotaflow.gateway.data.framing:1 imports quotaflow.gateway.server (a plane imports the shell)",
        "quotaflow.gateway.auth.tls:3 imports quotaflow.gateway.data.pending (the data plane calls auth, never back)",
        "quotaflow.gateway.auth.authorize:6 imports quotaflow.gateway.context (the data plane calls auth, never back)",
        "quotaflow.gateway.auth.authorize:7 imports quotaflow.gateway.data (the data plane calls auth, never back)",
        "quotaflow.gateway.observation.eventlog:8 imports quotaflow.gateway.config (observation only records)",
        "quotaflow.gateway.wire.protocol:11 imports quotaflow.gateway.auth.hidden_topics (the wire format sits below "
        "both planes)",
    ]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of a directed graph as a path [a, b, ..., a], else None (iterative DFS)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if start in state:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle() -> None:
    graph = {m: {t for _, t, loads in imports_of(m) if loads} for m in MODULES}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_cycle_inside_gateway_annotations_included() -> None:
    """Inside gateway/ no two modules name each other even for annotations (``TYPE_CHECKING`` imports and
    function-level imports counted): a cycle there is two planes pointing both ways, hidden from the loader."""
    gateway = [m for m in MODULES if _inside(m, GATEWAY)]
    graph = {m: {t for _, t, _ in imports_of(m) if _inside(t, GATEWAY)} for m in gateway}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_typing_only_and_local_imports_are_edges() -> None:
    """``imports_of`` yields the imports under ``if TYPE_CHECKING:`` (not loading) and those inside functions
    (loading), so the gateway's one-way rules see them."""
    edges = {(t, loads) for _, t, loads in imports_of("quotaflow.gateway.data.connection")}
    assert ("quotaflow.gateway.context", False) in edges  # under TYPE_CHECKING
    local = {(t, loads) for _, t, loads in imports_of("quotaflow.gateway.server")}
    assert ("quotaflow.gateway.observation.eventlog", True) in local  # imported inside a function


def test_string_imports_are_followed() -> None:
    """The walker sees importlib strings and "module:attr" tables, not only import statements; a child process's
    ``-m quotaflow.cli.main`` counts for the layers but loads nothing in this process."""
    assert ("quotaflow.cli.report", True) in {(t, loads) for _, t, loads in imports_of("quotaflow.cli.main")}
    spawned = {(t, loads) for _, t, loads in imports_of("quotaflow.testing.gateway_process")}
    assert ("quotaflow.cli.main", False) in spawned
