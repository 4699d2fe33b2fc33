"""A throwaway single-node Ceph cluster with an RGW (S3) front end on 127.0.0.1.

One ``ceph-mon``, one ``ceph-osd`` on memstore (RAM, no disks) and ``radosgw`` with
the beast front end, all in the foreground as subprocesses of this one, with no cephx
auth and every file (config, data, logs, pid files, admin sockets) in a fresh
temporary directory, so several can run side by side and nothing is left behind
(the daemons also die with the process that started them, should it be killed).
``.ci/install-debian`` installs the Debian packages it needs; :func:`ceph_available`
tells whether they are there.

Run as a script it prints the endpoint and the s3fs options, then stops when its
standard input closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ACCESS_KEY = "vsqs-ceph-access"
SECRET_KEY = "vsqs-ceph-secret"
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "osdmaptool")
START_TIMEOUT = 120.0
STOP_TIMEOUT = 10.0

# Everything a daemon or a tool writes is under {d}, the cluster's temporary directory.
_CONFIG = """\
[global]
fsid = {fsid}
mon_host = v2:127.0.0.1:{mon_port}
mon_initial_members = a
public_addr = 127.0.0.1
ms_bind_msgr1 = false
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
auth_allow_insecure_global_id_reclaim = false
ms_cluster_mode = crc
ms_service_mode = crc
ms_client_mode = crc
ms_mon_cluster_mode = crc
ms_mon_service_mode = crc
ms_mon_client_mode = crc
keyring = {d}/keyring
run_dir = {d}/run
admin_socket = {d}/run/$name.asok
pid_file = {d}/run/$name.pid
log_file = {d}/log/$name.log
mon_cluster_log_file = {d}/log/cluster.log
crash_dir = {d}/crash
exec_dir = {d}/run
log_to_stderr = false
err_to_stderr = false
log_to_syslog = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_max_pg_per_osd = 1000
mon_data_avail_warn = 1
mon_data_avail_crit = 0

[mon]
mon_data = {d}/mon
paxos_propose_interval = 0.01
paxos_min_wait = 0.01
ms_bind_retry_count = 1

[osd]
osd_data = {d}/osd
osd_objectstore = memstore
memstore_device_bytes = 4294967296
osd_crush_update_on_start = false
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 2

[client]
rgw_data = {d}/rgw
rgw_dns_name =
rgw_dynamic_resharding = false
rgw_enable_usage_log = false
rgw_enable_ops_log = false
rgw_thread_pool_size = 64
rgw_override_bucket_index_max_shards = 1
"""


def ceph_available() -> bool:
    """Whether the Ceph binaries this module runs are installed (``.ci/install-debian``)."""
    return all(shutil.which(name) for name in BINARIES)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: be killed when the thread that started it ends (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _PortTaken(RuntimeError):
    """A daemon could not bind the port picked for it: another process took it first."""


class _Cluster:
    """The daemons of one cluster and the directory they live in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "ceph.conf"
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}

    def run(self, *args: str, timeout: float = 60) -> str:
        """Run a tool against this cluster; return its standard output.

        Raises if the tool fails, or if a daemon exits while it runs (it would wait for it).
        """
        tool = subprocess.Popen(
            [*args, "--conf", str(self.conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root,
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    out, err = tool.communicate(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    self.check()
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{args[0]} took over {timeout:.0f} s") from None
        finally:
            if tool.poll() is None:
                tool.kill()
                tool.communicate()
        if tool.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited with {tool.returncode}:\n{err[-2000:]}")
        return out

    def start(self, name: str, *args: str) -> None:
        """Start a daemon in the foreground, its output in ``log/<name>.out``."""
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            self.daemons[name] = subprocess.Popen(
                [*args, "-f", "--conf", str(self.conf)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                preexec_fn=_die_with_parent,
            )

    def check(self) -> None:
        """Raise if a daemon has exited (:class:`_PortTaken` if it found its port taken)."""
        for name, process in self.daemons.items():
            if process.poll() is not None:
                log = self.root / "log" / f"{name}.log"
                error = _PortTaken if "Address already in use" in _read(log) else RuntimeError
                raise error(f"{name} exited with {process.returncode}\n{self.logs()}")

    def logs(self, lines: int = 20) -> str:
        """The last lines of the daemons' logs, for an error message."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            if tail := _read(path).splitlines()[-lines:]:
                parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop the daemons, last started first (quicker: each shuts down while the others
        it talks to are still there); TERM each, then KILL it if it lingers."""
        for process in reversed(self.daemons.values()):
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _wait_http(cluster: _Cluster, url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        cluster.check()
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # an S3 error document: the gateway answers
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"radosgw at {url} did not answer in time\n{cluster.logs()}")


def _boot(cluster: _Cluster, deadline: float) -> str:
    """Make and start the cluster in an empty directory; return the S3 endpoint."""
    root = cluster.root
    for sub in ("run", "log", "mon", "osd", "rgw", "crash"):
        (root / sub).mkdir()
    fsid = str(uuid.uuid4())
    mon_port = _free_port()
    cluster.conf.write_text(_CONFIG.format(fsid=fsid, d=root, mon_port=mon_port))
    monmap, osdmap = str(root / "monmap"), str(root / "osdmap")
    mon_addr = f"v2:127.0.0.1:{mon_port}"
    cluster.run("monmaptool", "--create", "--fsid", fsid, "--addv", "a", mon_addr, monmap)
    # osd.0 is in the monitor's first map already (under host "localhost"): no `ceph osd new`.
    cluster.run("osdmaptool", "--createsimple", "1", "--clobber", osdmap)
    cluster.run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap, "--osdmap", osdmap)
    osd_fsid = str(uuid.uuid4())
    mkfs = ("--mkfs", "--no-mon-config", "--monmap", monmap)  # the monitor is not up yet
    cluster.run("ceph-osd", "-i", "0", "--osd-uuid", osd_fsid, *mkfs)
    cluster.start("mon.a", "ceph-mon", "-i", "a")
    cluster.start("osd.0", "ceph-osd", "-i", "0")
    # radosgw-admin makes the default zone and the pools it needs as it goes.
    keys = ("--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY)
    user = ("user", "create", "--uid", "vsqs", "--display-name", "vsqs", *keys)
    cluster.run("radosgw-admin", *user, timeout=max(1.0, deadline - time.monotonic()))
    rgw_port = _free_port()
    frontend = f"beast endpoint=127.0.0.1:{rgw_port}"
    cluster.start("client.rgw", "radosgw", "-n", "client.rgw", "--rgw-frontends", frontend)
    endpoint = f"http://127.0.0.1:{rgw_port}"
    _wait_http(cluster, endpoint, deadline)
    return endpoint


@contextmanager
def ceph_rgw(bucket: str) -> Iterator[dict[str, Any]]:
    """Start a cluster with ``bucket`` in it; yield s3fs options that reach it; stop it."""
    root = Path(tempfile.mkdtemp(prefix="vsqs-ceph-"))
    cluster = _Cluster(root)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        for attempt in range(3):  # the ports are picked before the daemons bind them
            try:
                endpoint = _boot(cluster, deadline)
                break
            except _PortTaken:
                if attempt == 2:
                    raise
                cluster.stop()
                shutil.rmtree(root)
                root.mkdir()
                cluster = _Cluster(root)
        options = {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        import s3fs

        s3fs.S3FileSystem(**options, skip_instance_cache=True).call_s3(
            "create_bucket", Bucket=bucket
        )
        yield options
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if not ceph_available():
        sys.exit("Ceph is not installed: run .ci/install-debian")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the daemons on TERM too
    started = time.monotonic()
    with ceph_rgw(sys.argv[1] if len(sys.argv) > 1 else "vsqs-test") as opts:
        print(opts["client_kwargs"]["endpoint_url"], flush=True)
        print(json.dumps(opts), flush=True)
        print(f"ready in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        sys.stdin.read()
