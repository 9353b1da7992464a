"""interrupts.protocol must stay usable without Django (DESIGN.md)."""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import interrupts.protocol

FORBIDDEN = ("django", "channels", "daphne", "rest_framework", "httpx")
PROTOCOL_DIR = Path(interrupts.protocol.__file__).parent


def protocol_modules() -> list[str]:
    return ["interrupts.protocol"] + [
        f"interrupts.protocol.{m.name}" for m in pkgutil.iter_modules([str(PROTOCOL_DIR)])
    ]


def test_the_protocol_package_has_its_modules():
    names = protocol_modules()
    for expected in ("sse", "wire", "contract", "schema", "errors"):
        assert f"interrupts.protocol.{expected}" in names


def test_importing_every_protocol_module_loads_no_django():
    # A fresh interpreter, so nothing this test process imported counts.
    code = (
        "import importlib, json, sys\n"
        f"for name in {protocol_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=PROTOCOL_DIR.parent.parent,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_no_protocol_source_names_a_forbidden_package():
    # Catches imports hidden inside functions, which the import test cannot see.
    offenders = []
    for path in PROTOCOL_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            offenders += [f"{path.name}:{node.lineno} {r}" for r in roots if r in FORBIDDEN]
    assert offenders == []
