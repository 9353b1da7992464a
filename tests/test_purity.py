"""The protocol layer and the SDK stay usable without Django; every layer imports only downward."""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("django", "channels", "daphne", "rest_framework", "httpx")
# package -> modules allowed to know Django
PURE_PACKAGES = {"interrupts.protocol": set(), "interrupts.sdk": set(), "interrupts.verify_export": set()}


def modules_of(package: str) -> list[str]:
    directory = ROOT / package.replace(".", "/")
    allowed = PURE_PACKAGES[package]
    # Sub-packages too (protocol/contract/): walked, not just listed.
    return [package] + [
        m.name for m in pkgutil.walk_packages([str(directory)], prefix=f"{package}.")
        if m.name.removeprefix(f"{package}.") not in allowed
    ]


def test_the_pure_packages_have_their_modules():
    assert {f"interrupts.protocol.{n}" for n in ("sse", "wire", "contract", "contract.gate", "contract.answers",
                                                 "schema", "errors")} <= set(modules_of("interrupts.protocol"))
    assert {f"interrupts.sdk.{n}" for n in ("agent", "context", "driver")} <= set(modules_of("interrupts.sdk"))


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_importing_every_module_loads_no_django(package):
    # A fresh interpreter, so nothing this test process imported counts.
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules_of(package)!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"}, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_no_module_source_names_a_forbidden_package(package):
    # Catches imports hidden inside functions, which the import test cannot see.
    directory = ROOT / package.replace(".", "/")
    offenders = []
    sources = [directory.with_suffix(".py")] if directory.with_suffix(".py").exists() else list(directory.rglob("*.py"))
    assert sources
    for path in sources:
        if path.parent == directory and path.stem in PURE_PACKAGES[package]:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            offenders += [f"{path.name}:{node.lineno} {r}" for r in roots if r in FORBIDDEN]
    assert offenders == []


# --- The layers: each module imports only its own layer and the ones below -----------------
#
# Bottom first, as ../shared/DESIGN.md ("Layout") draws the tree. A module
# belongs to the layer of the longest prefix that names it. Imports inside
# functions count (they are how a cycle hides), and so do type-only ones.

LAYERS = [
    # The offline checker of an exported trail: protocol alone, so it runs without Django.
    ("protocol", ["interrupts.protocol", "interrupts.verify_export"]),
    ("sdk", ["interrupts.sdk"]),
    ("conf", ["interrupts.conf"]),
    ("models", ["interrupts.models"]),
    # Read-only predicates and words shared by the hub and the reads: below both, and below every leaf of hub/.
    ("rules", ["interrupts.rules"]),
    # Leaves every service may use: refusals, waking the supervisor, the agent
    # HTTP client, and broadcasting after commit.
    ("leaves", ["interrupts.hub.refusals", "interrupts.hub.wakeup", "interrupts.hub.egress", "interrupts.live.relay"]),
    ("hub", ["interrupts.hub"]),
    ("reads", ["interrupts.reads"]),
    ("live", ["interrupts.live"]),
    ("surfaces", ["interrupts.web", "interrupts.api", "interrupts.gateway", "interrupts.demo"]),
    ("app", ["interrupts.admin", "interrupts.apps", "interrupts.management", "interrupts.migrations", "interrupts"]),
]

APP = ROOT / "interrupts"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``: never run, so never part of a cycle."""
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return hidden


def _sources(planted: dict[Path, str] | None) -> list[tuple[Path, str]]:
    # A probe is planted in memory, not on disk: other workers scan the same tree at the same time.
    real = [(path, path.read_text()) for path in sorted(APP.rglob("*.py"))]
    return real + sorted((planted or {}).items())


def app_imports(runtime_only: bool = False, planted: dict[Path, str] | None = None) -> dict[str, set[str]]:
    """Every interrupts module, and the interrupts modules it imports (anywhere in its source)."""
    graph: dict[str, set[str]] = {}
    for path, text in _sources(planted):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        tree = ast.parse(text, filename=str(path))
        hidden = _type_only(tree) if runtime_only else set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                # `from pkg import mod` imports pkg.mod; `from mod import name` imports mod.
                targets = [f"{source}.{a.name}" if _is_module(f"{source}.{a.name}") else source for a in node.names]
            else:
                continue
            found |= {t for t in targets if t == "interrupts" or t.startswith("interrupts.")}
        graph[name] = found - {name}
    return graph


def layer_of(module: str) -> int:
    best, rank = -1, None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"{module} is in no layer: add it to LAYERS"
    return rank


def test_the_layer_map_knows_the_rooms_of_the_design():
    graph = app_imports()
    for module in (
        "interrupts.hub.outbox",
        "interrupts.hub.accept",
        "interrupts.hub.wakeup",
        "interrupts.hub.events",
        "interrupts.hub.outcomes",
        "interrupts.hub.refusals",
        "interrupts.reads.selectors",
        "interrupts.live.relay",
        "interrupts.live.consumers",
        "interrupts.web.inbox",
        "interrupts.conf",
    ):
        assert module in graph, module
    assert layer_of("interrupts.hub.wakeup") < layer_of("interrupts.hub.runs") < layer_of("interrupts.reads.selectors")
    assert layer_of("interrupts.models") < layer_of("interrupts.rules.words") < layer_of("interrupts.hub.refusals")
    # The reads take their predicates and words from rules, not from the write side.
    assert "interrupts.rules.words" in graph["interrupts.reads.selectors"]
    assert not [(module, target) for module, targets in graph.items() if module.startswith("interrupts.reads")
                for target in targets if target.startswith("interrupts.hub")]
    assert layer_of("interrupts.demo.views") > layer_of("interrupts.sdk.driver")


def test_every_import_points_down_or_across():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in app_imports().items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_layer_test_sees_rules_reaching_into_the_hub_or_the_reads():
    graph = app_imports(planted={APP / "rules" / "_upward_probe.py":
                                 "from ..hub import refusals\nfrom ..reads import selectors\n"})
    found = graph["interrupts.rules._upward_probe"]
    assert {"interrupts.hub.refusals", "interrupts.reads.selectors"} <= found
    assert all(layer_of(target) > layer_of("interrupts.rules._upward_probe") for target in found)


def test_no_import_cycle():
    graph = app_imports(runtime_only=True)
    # Only the app's own modules: a package's __init__ is a node like any other.
    cycles, state = [], {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(trail[trail.index(target):] + [module, target]) if target in trail
                              else f"{module} -> {target}")
            elif target not in state:
                visit(target, trail + [module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert cycles == []


def test_the_layer_test_sees_an_upward_import(tmp_path, monkeypatch):
    # The check itself, on a module that reaches up: a selector imported by a service.
    graph = app_imports(planted={APP / "hub" / "_upward_probe.py": "from ..reads import selectors\n"})
    assert "interrupts.reads.selectors" in graph["interrupts.hub._upward_probe"]
    assert layer_of("interrupts.reads.selectors") > layer_of("interrupts.hub._upward_probe")


# --- Transitions have one home: an interrupt's version moves only in interrupts/models/transitions.py ---

TRANSITIONS = APP / "models" / "transitions.py"


def version_bumps(planted: dict[Path, str] | None = None) -> list[str]:
    """Every ``F("version")`` outside the transitions: a version moved by hand, apart from its status change."""
    found = []
    for path, text in _sources(planted):
        if path == TRANSITIONS or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "F"
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "version"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_the_transitions_move_a_version():
    assert "F(\"version\")" in TRANSITIONS.read_text()
    assert version_bumps() == []


def test_the_version_test_sees_a_bump_by_hand():
    found = version_bumps(planted={APP / "hub" / "_version_probe.py":
                                   "from django.db import models\n\nBUMP = {\"version\": models.F(\"version\") + 1}\n"})
    assert found == ["interrupts/hub/_version_probe.py:3"]
