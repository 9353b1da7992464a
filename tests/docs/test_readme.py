"""The README stays a page: its two commands work as it says, and it points into docs/."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def dry_run(*args: str) -> str:
    done = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_readme_is_at_most_about_two_hundred_lines():
    assert len(README.splitlines()) <= 200


def test_every_make_target_the_readme_names_exists():
    named = set(re.findall(r"`make ([a-z-]+)", README))
    assert {"serve", "test"} <= named
    for target in sorted(named):
        dry_run(target)


def test_make_serve_listens_where_port_and_host_say():
    assert "make serve PORT=" in README and "make serve HOST=" in README
    assert "manage.py serve --host 127.0.0.1 --port 8000" in dry_run("serve")
    assert "manage.py serve --host 0.0.0.0 --port 8123" in dry_run("serve", "PORT=8123", "HOST=0.0.0.0")


def test_make_test_runs_pytest():
    assert "-m pytest" in dry_run("test")


def test_the_readme_lists_every_document():
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in README, f"the README's contents leave out docs/{page.name}"
