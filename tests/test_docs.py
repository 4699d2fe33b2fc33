"""The sessions of docs/cli.md print what the document shows
(tests/support/doc_sessions.py): a document that says "every session below was run
as shown" showed three-part receipts and a dead letter's receive count of 1
long after the code made four-part receipts and counted 2."""

from __future__ import annotations

from pathlib import Path

from .support.doc_sessions import AWS_ENV, Normaliser, environment, not_replayed, replay
from .support.servers import Server

DOCS = Path(__file__).resolve().parents[1] / "docs"
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
