"""``vsqs.stores``: a third-party store under a URL scheme of its own, from
``vsqs.Queue``, the ``vsqs`` command and Spark; and the registry's refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
import vsqs.stores
from vsqs import _names as names

#: A plugin as a third party ships it: a module and its entry point.
PLUGIN = '''
"""thirdparty://bucket/queue: a queue in a directory under storage option ``root``."""
import os

from vsqs.stores import LocalStore

OPENED = []


class ThirdPartyStore(LocalStore):
    pass


def open_store(url, storage_options):
    OPENED.append(url)
    store = ThirdPartyStore(os.path.join(storage_options["root"], url.split("://", 1)[1]))
    store.url = url
    return store
'''
SOURCE = str(Path(vsqs.__file__).resolve().parents[1])


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Path]:
    """A directory that holds the plugin module and its installed metadata."""
    site = tmp_path / "site"
    (site / "thirdparty_vsqs-0.1.dist-info").mkdir(parents=True)
    (site / "thirdparty_vsqs.py").write_text(PLUGIN)
    meta = site / "thirdparty_vsqs-0.1.dist-info"
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-vsqs\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(
        "[vsqs.stores]\nthirdparty = thirdparty_vsqs:open_store\n"
    )
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("thirdparty_vsqs", None)


@pytest.fixture
def registered(plugin: Path) -> Iterator[None]:
    """The plugin's scheme registered in this process (and forgotten after)."""
    vsqs.stores.register_scheme("thirdparty", "thirdparty_vsqs:open_store")
    try:
        yield
    finally:
        vsqs.stores.unregister_scheme("thirdparty")


def in_plugin_env(plugin: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command where the plugin is installed (on the path) and registered nowhere."""
    path = os.pathsep.join([str(plugin), SOURCE, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


# ------------------------------------------------------------------ Queue
def test_a_registered_scheme_serves_queues(registered: None, tmp_path: Path) -> None:
    options = {"root": str(tmp_path / "data")}
    with vsqs.Queue("thirdparty://bucket/jobs", storage_options=options) as q:
        assert q.url == "thirdparty://bucket/jobs"
        sent = q.send_batch([b"one", b"two"], bundle=False)
        msg = q.receive()
        assert msg is not None and (msg.id, msg.body) == (sent[0], b"one")
        msg.delete()
    assert sorted(os.listdir(tmp_path / "data" / "bucket" / "jobs")) == [sent[1], "vsqs.json"]


def test_urls_are_checked_before_the_opener_sees_them(registered: None, tmp_path: Path) -> None:
    import thirdparty_vsqs  # type: ignore[import-not-found]

    options = {"root": str(tmp_path)}
    bad = ("b/../q", "b//q", "b/.q", "../q", "b/q/..", "b/a b")
    bad += ("../..::x/q", "b/q?root=/", "b/q#x", "b/q::memory://b/q", "..?x/q")
    for url in (f"thirdparty://{path}" for path in bad):
        with pytest.raises(vsqs.InvalidQueueName):
            vsqs.Queue(url, storage_options=options)
    assert thirdparty_vsqs.OPENED == []


@pytest.mark.parametrize(
    ("scheme", "opener", "error"),
    [
        ("file", "m:f", "cannot be registered"),
        ("FILE", "m:f", "cannot be registered"),
        ("9p", "m:f", "not a URL scheme"),
        ("a b", "m:f", "not a URL scheme"),
        ("", "m:f", "not a URL scheme"),
        ("ok", "no-colon", "is a callable or a 'module:attr'"),
        ("ok", 42, "is a callable or a 'module:attr'"),
        ("s3", "m:f", "served already (by vsqs); clobber=True"),
    ],
)
def test_bad_registrations_are_refused(scheme: str, opener: Any, error: str) -> None:
    with pytest.raises(vsqs.InvalidArgument, match=error.replace("(", r"\(").replace(")", r"\)")):
        vsqs.stores.register_scheme(scheme, opener)


def test_a_registration_is_replaced_only_with_clobber(registered: None) -> None:
    vsqs.stores.register_scheme("THIRDPARTY", "thirdparty_vsqs:open_store")  # the same: fine
    with pytest.raises(vsqs.InvalidArgument, match="served already"):
        vsqs.stores.register_scheme("thirdparty", "other:open")
    vsqs.stores.register_scheme("thirdparty", "other:open", clobber=True)
    with pytest.raises(vsqs.UnsupportedStore, match="cannot load 'other:open'"):
        vsqs.Queue("thirdparty://b/q")


def test_an_opener_that_returns_no_store_is_refused(tmp_path: Path) -> None:
    vsqs.stores.register_scheme("notastore", lambda url, options: tmp_path)
    try:
        with pytest.raises(vsqs.UnsupportedStore, match="returned a PosixPath, not a vsqs Store"):
            vsqs.Queue("notastore://b/q")
    finally:
        vsqs.stores.unregister_scheme("notastore")


# -------------------------------------------------------------------- CLI
def test_the_command_reaches_an_installed_plugin(plugin: Path, tmp_path: Path) -> None:
    vsqs_command = str(Path(sys.executable).parent / "vsqs")
    root = f"root={tmp_path / 'data'}"
    sent = in_plugin_env(plugin, vsqs_command, "send", "thirdparty://b/jobs", "hello", "-o", root)
    assert sent.returncode == 0, sent.stderr
    got = in_plugin_env(plugin, vsqs_command, "receive", "thirdparty://b/jobs", "-o", root)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "hello"


def test_a_third_party_store_refuses_a_read_with_the_exported_too_large(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``TooLarge`` is part of the ``Store`` contract (``read_limited``), so a
    store outside the package raises it from ``vsqs.stores``: the queue passes
    over that message with a warning and receives the one behind it."""

    class CappedStore(vsqs.stores.MemoryStore):
        def read_limited(self, name: str, limit: int) -> bytes:
            data = self.read(name)
            if data.startswith(b"huge"):
                raise vsqs.stores.TooLarge(name, None, limit)
            return data

    q = vsqs.Queue(CappedStore("capped"))
    q.send(b"huge body")
    q.send(b"small body")
    with caplog.at_level("WARNING", logger="vsqs"):
        got = q.receive()
        assert got is not None and got.body == b"small body"
        assert [m.body for m in q.peek(10)] == []
    assert "too large" in caplog.text


# ------------------------------------------------------------------ Spark
SPARK_JOB = """
import json, sys
from pyspark.sql import SparkSession, functions as F

root, url = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[2]").appName("vsqs-third-party")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate()
)
try:
    rows = spark.range(30).select(F.concat(F.lit("row "), F.col("id")).alias("body"))
    rows.repartition(3).write.format("vsqs").mode("append").option("fs.root", root).save(url)
    read = spark.read.format("vsqs").option("fs.root", root).load(url)
    print(json.dumps(sorted(bytes(r.body).decode() for r in read.collect())))
finally:
    spark.stop()
"""


@pytest.mark.spark  # Spark in a process of its own
def test_spark_reads_and_writes_through_an_installed_plugin(plugin: Path, tmp_path: Path) -> None:
    """Spark's Python workers are other processes: they find the store by its
    entry point, as on a cluster where the plugin is installed."""
    pytest.importorskip("pyspark", reason="the spark extra is part of .[test]")
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(SPARK_JOB))
    data = tmp_path / "data"
    done = in_plugin_env(plugin, sys.executable, str(job), str(data), "thirdparty://b/jobs")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == sorted(f"row {i}" for i in range(30))
    written = [names.parse(n) for n in os.listdir(data / "b" / "jobs") if n != "vsqs.json"]
    assert sum(names.message_count(p.id) for p in written if p is not None) == 30  # in bundles
