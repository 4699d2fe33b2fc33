"""Administration commands of the ``vsqs`` command line: ``config`` (show or
change a queue's settings) and ``delete-queue`` (docs/administration.md)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, fields

import click

from .._admin import client_settings
from .._config import ENV_DURABLE, ENV_MAX_POLL_INTERVAL, ENV_NEW_GRACE, QueueConfig, unknown_env
from .._configure import CHANGEABLE, newest
from .._configure import effective as sourced
from .._errors import storage_errors
from ._common import open_queue, queue_options
from ._report import Report, json_option, out_line

_KINDS = {f.name: str(f.type) for f in fields(QueueConfig)}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_setting(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` of ``--set``, the value read as the setting's type
    (``none`` or nothing: no value, where a setting may have none). An
    unknown name keeps its text: :meth:`vsqs.Queue.configure` refuses it."""
    name, sep, raw = text.partition("=")
    if not sep:
        raise click.BadParameter(f"{text!r}: give NAME=VALUE", param_hint="--set")
    kind = _KINDS.get(name.strip(), "str")
    raw = raw.strip()
    if "None" in kind and raw.lower() in ("", "none"):
        return name.strip(), None
    base = kind.split("|")[0].strip()
    try:
        if base == "bool":
            if raw.lower() not in _TRUE + _FALSE:
                raise ValueError(raw)
            return name.strip(), raw.lower() in _TRUE
        return name.strip(), {"float": float, "int": int}.get(base, str)(raw)
    except ValueError:
        what = {"float": "a number", "int": "a whole number", "bool": "true or false"}.get(base)
        raise click.BadParameter(f"{text!r}: {name} takes {what}", param_hint="--set") from None


def _client_rows() -> dict[str, tuple[object, str]]:
    """This process's own settings, each with where it comes from."""
    durable, grace, poll = client_settings(None, None, None)
    rows: dict[str, tuple[object, str]] = {}
    for name, value, var in (
        ("durable", durable, ENV_DURABLE),
        ("new_grace", grace, ENV_NEW_GRACE),
        ("max_poll_interval", poll, ENV_MAX_POLL_INTERVAL),
    ):
        given = os.environ.get(var, "").strip()
        rows[name] = (value, f"environment variable {var}" if given else "default")
    return rows


def _show(url: str, version: int, rows: list[tuple[str, object, str]], as_json: bool) -> None:
    if as_json:
        doc = {"queue": url, "config_version": version} | {n: v for n, v, _ in rows}
        if any(source for _, _, source in rows):
            doc["sources"] = {n: s for n, _, s in rows}
        out_line(json.dumps(doc))
        return
    width = max(len(name) for name, _, _ in rows)
    shown = [json.dumps(value) for _, value, _ in rows]
    room = max(map(len, shown))
    for (name, _, source), value in zip(rows, shown, strict=True):
        out_line(f"{name:<{width}}  {value:<{room}}  {source}".rstrip())


@click.command("config", short_help="Show or change a queue's settings.")
@click.argument("url", metavar="QUEUE")
@click.option(
    "--set",
    "changes",
    multiple=True,
    metavar="NAME=VALUE",
    help=f"Change a setting (repeatable): {', '.join(CHANGEABLE)}. 'none' removes "
    "max_receives and dead_letter (together). Every client uses it within 10 s.",
)
@click.option(
    "--effective",
    is_flag=True,
    help="Also this process's own settings, and where each value comes from.",
)
@json_option
@queue_options
def config(url: str, changes: tuple[str, ...], effective: bool, as_json: bool) -> None:
    """Show QUEUE's settings (one per line, or --json), after the changes of --set.

    A change is a new config version, written by exclusive create: two
    changes at once both apply, one after the other. Settings that cannot
    change (format, dedup_window, dead_letter_blocks_group) are refused, with why.
    """
    settings = dict(parse_setting(text) for text in changes)
    with open_queue(url) as queue:
        if settings:
            queue.configure(**settings)
        if effective:
            rows = sourced(queue.store, _client_rows())
            unknown = unknown_env()
            if unknown:
                rows.append(("unknown_env", unknown, "unknown VSQS_* variables: ignored"))
        else:
            rows = [(k, v, "") for k, v in asdict(queue.config).items()]
        with storage_errors(f"reading the config of {queue.url}"):
            version = newest(queue.store).number
    _show(queue.url, version, rows, as_json)


@click.command("delete-queue", short_help="Delete a queue and everything vsqs wrote in it.")
@click.argument("url", metavar="QUEUE")
@click.option("--force", is_flag=True, help="Delete it even if it holds messages.")
@json_option
@queue_options
def delete_queue(url: str, force: bool, as_json: bool) -> None:
    """Delete QUEUE: its messages, records and config (and its directory, if
    then empty). Refuses a queue that holds messages unless --force. Files
    vsqs did not write stay and are named; the dead-letter queue stays.
    Other clients of QUEUE get "queue not found" within 10 s."""
    with open_queue(url) as queue:
        dead_letter = queue.dead_letter_url
        deleted = queue.delete_queue(force=force)
    Report(
        lambda f: (
            f"deleted {f['queue']}: {f['removed']:,} objects"
            + (f"; kept {len(f['kept'])} foreign: {', '.join(f['kept'][:10])}" if f["kept"] else "")
            + (f"; its dead-letter queue {f['dead_letter']} is left" if f["dead_letter"] else "")
        ),
        as_json=as_json,
        queue=queue.url,
        removed=deleted.removed,
        kept=deleted.kept,
        dead_letter=dead_letter,
    ).done()


__all__ = ["config", "delete_queue", "parse_setting"]
