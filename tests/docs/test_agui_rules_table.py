"""docs/agui-1.0.md names a test for every AG-UI 1.0 consumer rule that applies, and each test exists.

The table is read as text and the test modules with ``ast``: nothing is
imported, so this stays quick and says which row is wrong.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "agui-1.0.md"
ROW = re.compile(r"^\| (C\d+) \| (.+?) \| (applies|does not apply, because .+?) \| (.+?) \|$")


def rows() -> dict[str, tuple[str, str]]:
    """Rule -> (applies column, test column), every row of the table."""
    found = {}
    for line in TABLE.read_text().splitlines():
        if (match := ROW.match(line)) is not None:
            assert match[1] not in found, f"{match[1]} is in the table twice"
            found[match[1]] = (match[3], match[4])
    return found


def defined(module: Path) -> set[str]:
    """``name`` of every module-level test function and ``Class::name`` of every test method."""
    tree = ast.parse(module.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def test_every_consumer_rule_c1_to_c76_has_a_row():
    assert list(rows()) == [f"C{number}" for number in range(1, 77)]


def test_each_rule_that_applies_names_a_test_that_exists_and_carries_its_number():
    wrong = []
    for rule, (applies, test) in rows().items():
        if applies != "applies":
            continue
        reference = test.strip("`")
        module, _, name = reference.partition("::")
        path = ROOT / module
        if not name or not path.is_file():
            wrong.append(f"{rule}: {test!r} names no test module")
        elif name not in defined(path):
            wrong.append(f"{rule}: {module} has no test {name}")
        elif f"_{rule.lower()}_" not in f"_{name.rpartition('::')[2].removeprefix('test_')}_":
            wrong.append(f"{rule}: {name} is not named after {rule}")
    assert wrong == []


def test_a_rule_that_does_not_apply_says_why_and_names_no_test():
    for rule, (applies, test) in rows().items():
        if applies != "applies":
            assert len(applies) > len("does not apply, because "), rule
            assert test == "–", rule
