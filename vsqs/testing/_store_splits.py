"""The store contract of :meth:`vsqs.Store.split` (part of :class:`~vsqs.testing.StoreTests`).

A split replaces one part of a bundle by two, both with the source's
35-character core and the next version: exclusive with every other rename,
split or delete of the source, and never shown half done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import pytest

import vsqs
from vsqs import _names as names

from ._store_support import EXPIRY_MS, THREADS, fresh_id, listed, run_threads

#: A bundle of a group holding all of its 128 messages: the longest names.
FULL = (1 << names.MAX_BUNDLE) - 1
GROUP = "g" + "5" * 16


def part(core: str, members: int, version: int, *, token: str | None = None) -> str:
    """The held name (or, at version 0, the ready name) of a bundle's part."""
    part_id = names.bundle_id(core, members, token)
    if version == 0:
        return part_id
    return names.invisible_name(part_id, EXPIRY_MS + members % 1000, 1, version)


def split_names(
    members: int = 0b111, version: int = 0, token: str | None = None
) -> tuple[str, str, str]:
    """A fresh source (the part of ``members`` at ``version``) and the two
    parts it splits into: its lowest message, and the rest."""
    core = fresh_id()
    low = members & -members
    return (
        part(core, members, version, token=token),
        part(core, low, version + 1, token=token),
        part(core, members ^ low, version + 1, token=token),
    )


def race(store: vsqs.Store, calls: list[Callable[[], None]]) -> int:
    """Run ``calls`` at once, one thread each; which one won (the others must
    find the source gone)."""
    won: list[int] = []

    def run(i: int) -> None:
        try:
            calls[i]()
        except FileNotFoundError:
            return
        won.append(i)

    assert run_threads(len(calls), run) == []
    assert len(won) == 1, f"{len(won)} of {len(calls)} racing moves of one source won"
    store.flush()
    return won[0]


class SplitTests:
    """:meth:`vsqs.Store.split` on the backend's ``opened`` store."""

    @pytest.mark.parametrize(
        ("members", "version", "token"),
        [(0b111, 0, None), (0b1010, 3, GROUP), (FULL, names.LAST_HELD_VERSION - 1, GROUP)],
        ids=["ready", "held-in-a-group", "longest-names"],
    )
    def test_a_split_replaces_its_source_by_both_targets(
        self, opened: vsqs.Store, members: int, version: int, token: str | None
    ) -> None:
        src, first, second = split_names(members, version, token)
        opened.write_new(src, b"the bundle", fsync=False)
        opened.split(src, first, second)
        opened.flush()
        assert listed(opened) == sorted([first, second])
        assert opened.read(first) == opened.read(second) == b"the bundle"
        with pytest.raises(FileNotFoundError):
            opened.read(src)
        assert opened.take_repairs() == []  # nothing crashed: nothing to repair

    def test_a_split_of_a_missing_source_changes_nothing(self, opened: vsqs.Store) -> None:
        src, first, second = split_names()
        with pytest.raises(FileNotFoundError):
            opened.split(src, first, second)
        opened.flush()
        assert listed(opened) == []
        for name in (first, second):
            with pytest.raises(FileNotFoundError):
                opened.read(name)

    @pytest.mark.parametrize("rival", ["split", "rename", "delete"])
    def test_exactly_one_of_a_split_and_its_rivals_wins(
        self, opened: vsqs.Store, rival: str
    ) -> None:
        """A split races other splits, renames or deletes of its source: one
        of them wins, the others find the source gone, and the source's
        content ends where the winner put it."""
        if not opened.exclusive_claims():
            pytest.skip(f"claims are not exclusive on this store ({opened.refusal})")
        for _ in range(3):
            src, first, second = split_names(0b110110, 1)
            opened.write_new(src, b"once", fsync=False)
            outcomes: list[list[str]] = []
            calls: list[Callable[[], None]] = []
            for i in range(THREADS // 2):
                mine = [t.replace(".1.2", f".{i + 1}.2") for t in (first, second)]
                outcomes.append(sorted(mine))
                calls.append(partial(opened.split, src, *mine))
                if rival == "rename":
                    moved = names.invisible_name(names.id_of(src), EXPIRY_MS, i + 1, 2)
                    outcomes.append([moved])
                    calls.append(partial(opened.rename, src, moved))
                elif rival == "delete":
                    outcomes.append([])
                    calls.append(partial(opened.delete, src, known=True))
                else:
                    theirs = [t.replace(".1.2", f".{i + 1}0.2") for t in (first, second)]
                    outcomes.append(sorted(theirs))
                    calls.append(partial(opened.split, src, *theirs))
            winner = outcomes[race(opened, calls)]
            assert listed(opened, src[: names.ID_LEN]) == winner
            for name in winner:
                assert opened.read(name) == b"once"

    def test_names_of_gives_the_names_of_exactly_that_id(self, opened: vsqs.Store) -> None:
        core = fresh_id()
        mine, longer = part(core, 0x3, 1), part(core, 0x3F, 1)  # b3 is a prefix of b3f
        other = part(core, 0x30, 1)
        for name in (mine, longer, other):
            opened.write_new(name, b"x", fsync=False)
        assert sorted(opened.names_of(names.id_of(mine))) == [mine]
        assert sorted(opened.names_of(names.id_of(longer))) == [longer]

    def test_a_counting_listing_shows_each_message_once_during_splits(
        self, opened: vsqs.Store
    ) -> None:
        """``list(settle=True)`` while splits run: a source, or both its
        targets, never the source beside a target nor one target alone."""
        splits = [split_names(0b1111, 1) for _ in range(20)]
        for src, _, _ in splits:
            opened.write_new(src, b"x", fsync=False)
        done = threading.Event()
        seen: list[list[str]] = []

        def count(i: int) -> None:
            if i == 0:
                try:
                    for src, first, second in splits:
                        opened.split(src, first, second)
                finally:
                    done.set()
                return
            while not done.is_set():
                seen.append(sorted(opened.list(settle=True)))

        assert run_threads(2, count) == []
        seen.append(sorted(opened.list(settle=True)))
        for shown in seen:
            for src, first, second in splits:
                mine = [n for n in shown if n[: names.ID_LEN] == src[: names.ID_LEN]]
                assert mine in ([src], sorted([first, second])) or (
                    mine == [] and not opened.lists_in_order  # a directory scan may miss a rename
                ), mine
        assert seen[-1] == sorted(t for _, *targets in splits for t in targets)
