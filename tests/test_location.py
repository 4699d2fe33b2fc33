"""Queue locations (vsqs/stores/_location.py): one parse for every path and
URL a user gives, and messages that never show a URL's password."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs.stores import MemoryStore, register_scheme, unregister_scheme
from vsqs.stores._location import Location, is_sibling_name, without_credentials
from vsqs.stores._registry import parse_location

from .support.cli import said


@pytest.fixture
def credtest() -> Iterator[str]:
    """A registered scheme whose URLs carry a user and password (its queues
    live in memory, and none exists until created)."""
    register_scheme("credtest", lambda url, _options: MemoryStore(url.rpartition("/")[2]))
    yield "credtest://user:s3cret@host"
    unregister_scheme("credtest")


def test_a_redrive_error_never_shows_the_password_of_a_dead_letter_url(
    tmp_path: Path, credtest: str
) -> None:
    """It said 'refusing to redrive credtest://user:s3cret@host/dlq into ...'."""
    vsqs.Queue(tmp_path / "q").close()
    with pytest.raises(vsqs.InvalidArgument) as refused:
        vsqs.redrive(f"{credtest}/dlq", tmp_path / "q")
    assert "s3cret" not in str(refused.value) and "credtest://host/dlq" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://user:s3cret@127.0.0.1:1/a/q",  # nothing listens on port 1: refused
        "ftp://user:s3cret@127.0.0.1:1/a/../q",
        "s3://user:s3cret@bucket//q",
        "bad scheme://user:s3cret@host/q",
    ],
)
def test_an_error_opening_a_url_never_shows_its_password(url: str) -> None:
    with pytest.raises(vsqs.VsqsError) as failed:
        vsqs.Queue(url)
    message = str(failed.value)
    assert "s3cret" not in message and "user" not in message, message
    assert "\n" not in message


def test_the_redrive_command_never_reports_the_password_of_a_url(tmp_path: Path) -> None:
    """It said 'moved 0 messages from memory://user:s3cret@host/dlq to ...'."""
    vsqs.Queue(tmp_path / "q").close()
    dlq = "memory://user:s3cret@host/dlq"  # never created: moves 0
    assert said("redrive", dlq, str(tmp_path / "q"), "--force") == (
        f"moved 0 messages from memory://host/dlq to {tmp_path / 'q'}\n"
    )


def test_list_queues_never_shows_the_password_of_its_root() -> None:
    with pytest.raises(vsqs.VsqsError) as failed:
        vsqs.list_queues("ftp://user:s3cret@127.0.0.1:1/a")
    assert "s3cret" not in str(failed.value)


def test_without_credentials_removes_only_the_user_and_password_of_each_link() -> None:
    assert without_credentials("ftp://u:p@host:21/a/q") == "ftp://host:21/a/q"
    assert without_credentials("simplecache::s3://k:s@b/q") == "simplecache::s3://b/q"
    assert without_credentials("s3://b/a@b/q") == "s3://b/a@b/q"  # an @ in the path stays
    assert without_credentials("/tmp/a@b:c/q") == "/tmp/a@b:c/q"


def test_two_spellings_of_one_place_have_one_key(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "q")
    local = {
        parse_location(spelling).key
        for spelling in (tmp_path / "q", f"file://{tmp_path}/q", str(tmp_path / "alias"))
    }
    assert local == {str((tmp_path / "q").resolve())}
    assert len({parse_location(u).key for u in ("s3://b/q", "S3A://b/q/", "s3://b/q//")}) == 1
    assert parse_location("gs://b/q").key == parse_location("gcs://b/q").key
    assert parse_location("s3://b/q").key != parse_location("gs://b/q").key


@pytest.mark.parametrize(
    "bad",
    ["s3://b/../q", "s3://b/q/.", "s3:/b/q", "file://host/q", "/tmp/bad name!", "", "\x00"],
)
def test_a_location_that_names_no_queue_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(vsqs.InvalidQueueName) as refused:
        Location.parse(bad)
    assert "\n" not in str(refused.value)


def test_a_registered_scheme_mistyped_as_a_local_path_is_refused(credtest: str) -> None:
    with pytest.raises(vsqs.InvalidQueueName, match="did you mean 'credtest://h/q'"):
        parse_location("credtest:/h/q")
    assert Location.parse("credtest:/h/q").url.endswith("/credtest:/h/q")  # not known there


def test_a_bare_name_is_a_sibling_and_a_path_or_url_is_not() -> None:
    assert is_sibling_name("jobs-dlq")
    assert not any(map(is_sibling_name, ["/var/q/dlq", "s3://b/dlq", "a/dlq"]))
