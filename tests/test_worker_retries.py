"""Where ``consume``'s retry delays come from: the queue's config, the
environment at creation, and the built-in values for a config written before
they existed. (How the delays are applied is in the conformance suite.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vsqs
from vsqs import _names as names


def test_the_environment_sets_the_retry_delays_of_queues_created_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VSQS_RETRY_DELAY", "2.5")
    monkeypatch.setenv("VSQS_MAX_RETRY_DELAY", "40")
    with vsqs.Queue(tmp_path / "q") as q:
        assert (q.config.retry_delay, q.config.max_retry_delay) == (2.5, 40)
    written = json.loads((tmp_path / "q" / names.CONFIG_NAME).read_text())
    assert (written["retry_delay"], written["max_retry_delay"]) == (2.5, 40)
    monkeypatch.setenv("VSQS_RETRY_DELAY", "9")  # only for queues created now
    with vsqs.Queue(tmp_path / "q") as q:
        assert q.config.retry_delay == 2.5
    with pytest.raises(vsqs.QueueConfigError, match=r"retry_delay=2\.5"):
        vsqs.Queue(tmp_path / "q", retry_delay=3)
    monkeypatch.setenv("VSQS_RETRY_DELAY", "0.001")
    with pytest.raises(vsqs.InvalidArgument, match=r"^VSQS_RETRY_DELAY must be at least 0\.01"):
        vsqs.Queue(tmp_path / "other")


def test_a_config_written_before_retry_delays_existed_means_the_built_in_ones(
    tmp_path: Path,
) -> None:
    (tmp_path / "q").mkdir()
    old = {"format": names.FORMAT_VERSION, "visibility_timeout": 30}
    (tmp_path / "q" / names.CONFIG_NAME).write_text(json.dumps(old))
    with vsqs.Queue(tmp_path / "q") as q:
        assert (q.config.retry_delay, q.config.max_retry_delay) == (1.0, 300.0)
