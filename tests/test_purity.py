"""The protocol layer, and the SDK but for its Django view, stay usable without Django."""

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
PURE_PACKAGES = {"interrupts.protocol": set(), "interrupts.sdk": {"views"}}


def modules_of(package: str) -> list[str]:
    directory = ROOT / package.replace(".", "/")
    allowed = PURE_PACKAGES[package]
    return [package] + [
        f"{package}.{m.name}" for m in pkgutil.iter_modules([str(directory)]) if m.name not in allowed
    ]


def test_the_pure_packages_have_their_modules():
    assert {f"interrupts.protocol.{n}" for n in ("sse", "wire", "contract", "schema", "errors")} <= set(
        modules_of("interrupts.protocol")
    )
    assert {f"interrupts.sdk.{n}" for n in ("agent", "context", "driver")} <= set(modules_of("interrupts.sdk"))
    assert "interrupts.sdk.views" not in modules_of("interrupts.sdk")


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
    for path in directory.glob("*.py"):
        if path.stem in PURE_PACKAGES[package]:
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
