"""The tests' moto server takes each request at one instant, as S3 does."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import pytest

from .support.moto_server import serve


class _Contended:
    """A lock that sets ``event`` when a request has to wait for it."""

    def __init__(self, event: threading.Event) -> None:
        self._lock = threading.Lock()
        self._event = event

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self._event.set()
            self._lock.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()


def test_two_racing_exclusive_creates_of_one_key_never_both_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto checks that the key is absent, then writes it several steps later.

    The create that passes its check first is held between the two until the
    other create has returned or waits for it: without the server's lock the
    other passes its check too, and both win (seen under load in
    ``test_eight_racing_consumer_processes_on_s3``: one message acked twice).
    """
    import boto3
    from botocore.config import Config
    from moto.s3.responses import S3Response

    server, app = serve()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{server.server_port}",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1}),
        )
        client.create_bucket(Bucket="vsqs-race")
        progress = threading.Event()  # the other create returned, or waits for the lock
        app.lock = _Contended(progress)
        first = threading.Lock()
        checked = S3Response._get_checksum  # called between the check and the write

        def held(self: S3Response, *args: Any) -> Any:
            if first.acquire(blocking=False):
                progress.wait(timeout=60)
            return checked(self, *args)

        monkeypatch.setattr(S3Response, "_get_checksum", held)
        statuses: list[int] = []

        def create() -> None:
            try:
                client.put_object(Bucket="vsqs-race", Key="k.moved", Body=b"x", IfNoneMatch="*")
                statuses.append(200)
            except client.exceptions.ClientError as exc:
                statuses.append(exc.response["ResponseMetadata"]["HTTPStatusCode"])
            progress.set()

        racers = [threading.Thread(target=create) for _ in range(2)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        assert sorted(statuses) == [200, 412]
    finally:
        server.shutdown()
