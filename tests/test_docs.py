"""The manual stays true: the sessions of docs/cli.md print what the document
shows (tests/support/doc_sessions.py: a document that says "every session below was
run as shown" showed three-part receipts and a dead letter's receive count
of 1 long after the code made four-part receipts and counted 2); the docs
build with warnings as errors; every test they cite exists."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import shlex
import subprocess
import sys
from pathlib import Path

import vsqs
import vsqs.testing

from .support.doc_sessions import AWS_ENV, Normaliser, environment, not_replayed, replay
from .support.servers import Server

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Steps run whose output is not compared, and why.
UNCOMPARED = {
    "vsqs stats big --json": "what head left behind depends on the pipe, as the document says",
}


def test_the_sessions_of_the_cli_guide_print_what_it_shows(
    tmp_path: Path, s3_server: Server
) -> None:
    endpoint = s3_server.storage_options["client_kwargs"]["endpoint_url"]
    env = environment(AWS_ENV | {"AWS_ENDPOINT_URL": endpoint})
    shown, printed = Normaliser(), Normaliser()
    replayed = 0
    for step, out, status in replay((DOCS / "cli.md").read_text(), tmp_path, env, not_replayed):
        where = f"docs/cli.md:{step.line}: $ {step.command}"
        assert status == step.status, f"{where}\nexited {status}; printed:\n" + "\n".join(out)
        replayed += 1
        if step.command.startswith(tuple(UNCOMPARED)):
            continue
        assert printed(out) == shown(step.shown), f"{where}\nprinted:\n" + "\n".join(out)
    assert replayed > 50, f"only {replayed} steps: is docs/cli.md still made of sessions?"


def test_the_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    """mkdocs.yml's nav, every link and anchor, and the API reference that
    mkdocstrings generates from the docstrings (griffe's warnings included)."""
    site = tmp_path / "site"
    config = ROOT / "mkdocs.yml"
    build = ["mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)]
    built = subprocess.run(
        [sys.executable, "-m", *build],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    api = (site / "api" / "vsqs" / "index.html").read_text()
    assert "visibility_timeout" in api, "the API reference was not generated from the docstrings"


#: A test cited by the manual: ``tests/x.py::name``, ``QueueTests::name``
#: (a conformance suite, vsqs.testing) or a bare ``name``, each in backquotes.
CITED = re.compile(r"`(?:([\w/]+\.py|QueueTests|StoreTests)::)?(test_\w+)(?:\[[^\]`]*\])?`")


def functions_named_test_in(path: Path) -> set[str]:
    """The names of the test functions and methods a file defines."""
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_test_the_docs_cite_exists() -> None:
    """A promise is only as good as the test named beside it: a renamed or
    deleted test leaves the manual citing nothing."""
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("vsqs/testing/*.py")]
    anywhere = set().union(*(functions_named_test_in(f) for f in files))
    suites = {"QueueTests": vsqs.testing.QueueTests, "StoreTests": vsqs.testing.StoreTests}
    missing, cited = [], 0
    for doc in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]:
        for where, name in CITED.findall(doc.read_text()):
            cited += 1
            if where in suites:
                found = hasattr(suites[where], name)
            elif where:
                found = (ROOT / where).is_file() and name in functions_named_test_in(ROOT / where)
            else:
                found = name in anywhere
            if not found:
                missing.append(f"{doc.name}: {where}::{name}" if where else f"{doc.name}: {name}")
    assert not missing, "cited tests that do not exist:\n" + "\n".join(missing)
    assert cited > 200, f"only {cited} tests cited: is the promise matrix still in docs/?"


def test_the_shell_guide_uses_only_commands_and_options_that_exist() -> None:
    """docs/shell.md shows commands without their output (cli.md's sessions
    show that): each of its subcommands and options is in ``--help``."""
    commands = re.findall(r"`(vsqs [^`]+)`", (DOCS / "shell.md").read_text())
    helps: dict[str, str] = {}
    unknown = []
    for command in commands:
        argv = shlex.split(command)
        if argv[1] not in helps:
            shown = subprocess.run(
                [sys.executable, "-m", "vsqs", argv[1], "--help"], capture_output=True, text=True
            )
            assert shown.returncode == 0, f"{command}: {shown.stderr}"
            helps[argv[1]] = shown.stdout
        options = [a.split("=", 1)[0] for a in argv[2:] if a.startswith("-")]
        unknown += [f"{command}: {o}" for o in options if not re.search(rf"{o}\b", helps[argv[1]])]
    assert not unknown, "options that --help does not show:\n" + "\n".join(unknown)
    assert len(commands) > 15, f"only {len(commands)} commands: is docs/shell.md still a table?"


def test_every_file_the_docs_name_exists() -> None:
    """Modules move (the stores and the command line left the flat package):
    a path in backquotes in the manual or the README names a file or folder
    of the repository that exists."""
    named = {
        (doc.name, path)
        for doc in [*DOCS.glob("*.md"), ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md"]
        for path in re.findall(r"`((?:vsqs|tests|benchmarks|docs)/[\w/.-]*)", doc.read_text())
    }
    missing = sorted(f"{doc}: {path}" for doc, path in named if not (ROOT / path).exists())
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)
    assert len(named) > 50, f"only {len(named)} paths: does the pattern still find them?"


def test_the_settings_table_names_every_setting() -> None:
    """docs/settings.md is the one table of settings: every ``VSQS_*``
    variable the package reads, every keyword of ``vsqs.Queue``, and, marked
    stored, every field of the config a queue keeps in ``vsqs.json``."""
    table = (DOCS / "settings.md").read_text()
    source = "\n".join(p.read_text() for p in (ROOT / "vsqs").rglob("*.py"))
    variables = set(re.findall(r"VSQS_[A-Z_]+", source))
    keywords = set(inspect.signature(vsqs.Queue).parameters) - {"url"}
    with vsqs.Queue(vsqs.MemoryStore("settings")) as q:
        stored = {
            field.name
            for field in dataclasses.fields(q.config)
            if field.metadata.get("setting", True)
        }
    rows = {row.split("|")[2].strip(): row for row in table.splitlines() if row.startswith("| ")}
    missing = [v for v in sorted(variables) if f"`{v}`" not in table]
    missing += [k for k in sorted(keywords) if not any(f"`{k}=`" in key for key in rows)]
    missing += [
        f"{f} (stored)"
        for f in sorted(stored)
        if not any(f"`{f}=`" in key and "| stored |" in row for key, row in rows.items())
    ]
    assert not missing, "settings the table leaves out:\n" + "\n".join(missing)
    assert len(variables) >= 8 and len(stored) >= 6, "the search finds too little to check"
