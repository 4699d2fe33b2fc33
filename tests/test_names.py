"""The name grammar: pure functions, so properties over many inputs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vsqs
from vsqs import _names as names

millis = st.integers(min_value=0, max_value=names.MAX_EXPIRY_MS)
counts = st.integers(min_value=0, max_value=names.MAX_COUNT)
versions = st.integers(min_value=1, max_value=names.MAX_VERSION)


@given(st.lists(millis, min_size=1, max_size=200))
def test_ids_strictly_increase_even_when_the_clock_stands_still_or_steps_back(
    clock_readings: list[int],
) -> None:
    generator = names.IdGenerator()
    issued = [generator.next_id(ms) for ms in clock_readings]
    assert issued == sorted(issued) and len(set(issued)) == len(issued)
    assert all(names.parse(i) == names.Name(i, names.READY) for i in issued)


def test_sequence_overflow_moves_to_the_next_millisecond() -> None:
    generator = names.IdGenerator()
    issued = [generator.next_id(5) for _ in range(0x10000 + 2)]
    assert issued == sorted(issued)
    assert names.id_ms(issued[-1]) == 6 and names.id_ms(issued[0x10000 - 1]) == 5


def test_ids_of_two_generators_never_collide() -> None:
    one, two = names.IdGenerator(), names.IdGenerator()
    assert {one.next_id(7) for _ in range(100)}.isdisjoint({two.next_id(7) for _ in range(100)})


@given(st.integers(min_value=0, max_value=names.MAX_EXPIRY_MS - 1), millis, counts, versions)
def test_invisible_names_round_trip_and_sort_by_id(
    sent: int, expiry: int, count: int, version: int
) -> None:
    message_id = names.IdGenerator().next_id(sent)
    name = names.invisible_name(message_id, expiry, count, version)
    assert names.parse(name) == names.Name(message_id, names.INVISIBLE, expiry, count, version)
    assert names.parse(names.new_name(message_id)) == names.Name(message_id, names.NEW)
    later = names.IdGenerator().next_id(sent + 1)
    assert sorted([later, name]) == [name, later]


def rebuilt(parsed: names.Name) -> str:
    """The name ``parsed`` came from, made again from its parts (also used by
    ``benchmarks/fuzz_names.py``)."""
    if parsed.state == names.READY:
        return parsed.id
    if parsed.state == names.NEW:
        return names.new_name(parsed.id)
    return names.invisible_name(
        parsed.id, parsed.expiry_ms or 0, parsed.receive_count, parsed.version
    )


@given(millis, counts, st.lists(st.tuples(millis, st.booleans()), min_size=1, max_size=30))
def test_a_message_never_has_the_same_name_twice(
    expiry: int, count: int, moves: list[tuple[int, bool]]
) -> None:
    """Whatever expiries its renames choose (back to earlier ones too), each
    rename gives a message a name it never had: the version grows."""
    name = names.parse(names.IdGenerator().next_id(1))
    assert name is not None
    seen = {name.id}
    for expiry, claim in moves:
        new = names.next_name(name, expiry, name.receive_count + claim)
        assert new not in seen
        seen.add(new)
        name = names.parse(new)
        assert name is not None


@given(millis, millis)
def test_origin_record_names_round_trip_and_are_no_message_names(
    message_ms: int, record_ms: int
) -> None:
    message_id = names.IdGenerator().next_id(message_ms)
    record_id = names.IdGenerator().next_id(record_ms)
    record = names.origin_name(message_id, record_id)
    assert names.origin_record(record) == (message_id, record_id)
    assert names.origin_record(message_id + names.ORIGIN_SUFFIX) == (message_id, "")  # as before
    assert names.parse(record) is None and names.origin_id(message_id) is None
    assert names.origin_record(f"{message_id}.{record_id}x{names.ORIGIN_SUFFIX}") is None


def test_a_version_past_the_limit_is_refused() -> None:
    name = names.Name(names.ids.next_id(1), names.INVISIBLE, 5, 1, names.MAX_VERSION)
    with pytest.raises(vsqs.InvalidArgument, match="renamed more than"):
        names.next_name(name, 6, 1)


@pytest.mark.parametrize(
    "name",
    [
        "1700000000000-0000-0123456789abcdef.1700000000000.1",  # format 1: no version
        "1700000000000-0000-0123456789abcdef.1700000000000.1.0",  # version 0 is the ready name
        "1700000000000-0000-0123456789abcdef.1700000000000.1.01",
        "1700000000000-0000-0123456789abcdef.1700000000000.1.1000000000",
    ],
)
def test_names_outside_the_grammar_are_foreign(name: str) -> None:
    assert names.parse(name) is None


@given(st.text(max_size=80))
def test_arbitrary_text_is_foreign_or_round_trips(text: str) -> None:
    parsed = names.parse(text)
    if parsed is None:
        return
    assert rebuilt(parsed) == text
    assert "/" not in text and ".." not in text.replace(".new", "")


@given(st.text(max_size=80) | st.binary(max_size=40) | st.integers() | st.none())
def test_receipts_are_validated_before_use(receipt: object) -> None:
    try:
        parsed = names.parse_receipt(receipt)
    except vsqs.InvalidReceipt:
        return
    assert isinstance(receipt, str) and parsed.receive_count >= 1 and "/" not in receipt


@pytest.mark.parametrize("name", ["jobs", "a", "A-b_c.1", "x" * 128])
def test_valid_queue_names(name: str) -> None:
    assert names.validate_queue_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a..b", "../x", "a/b", "/a", ".hidden", "-x", "x" * 129, "é", "a b", None, 3],
)
def test_invalid_queue_names(name: object) -> None:
    with pytest.raises(vsqs.InvalidQueueName):
        names.validate_queue_name(name)


def test_fork_gives_the_child_a_new_nonce() -> None:
    import os

    parent = names.ids.next_id(1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write, names.ids.next_id(1).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    assert child[-16:] != parent[-16:]
