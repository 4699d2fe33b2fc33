"""What one receiver knows of its queue's message groups between listings.

A message of a group may be claimed only while no message of its group is
in flight and no older message of its group is still there (docs/groups.md).
A listing shows both, since every name of a grouped message carries its
group's token: the in-flight names (received, not expired) hold their group;
the candidates come oldest first, so the first of a group is its head and
every later one waits behind it. :class:`Groups` keeps, per token, the
in-flight names this receiver knows of, the groups it must not claim from
until its next listing (another client took their head, or this receiver
passed over it), and the names it took from its candidates while their group
was closed (parked), to put back when it opens again in its view.
"""

from __future__ import annotations

from . import _names as names


def token_of(name: str) -> str | None:
    """The group token of a name of the grammar (``None`` without a group):
    :func:`~vsqs._names.group_of` its :func:`~vsqs._names.id_of`, in one call."""
    end = name.find(".")
    if end < 0:
        end = len(name)
    if end > names.ID_LEN + 17 and name[end - 17] == names.GROUP_TAG:
        return name[end - 17 : end]
    return None


def holds(name: str) -> bool:
    """Whether an invisible ``name`` holds its group: one received (count > 0),
    whose group blocks until it expires. A delayed send does not (it joins
    its group when it is due)."""
    parsed = names.parse(name)
    return parsed is not None and parsed.receive_count > 0


class Groups:
    """One receiver's view of the groups (the caller holds its view's lock)."""

    __slots__ = ("blocked", "held", "parked", "taken")

    def __init__(self) -> None:
        #: token -> the in-flight names of the group this view knows of
        self.held: dict[str, set[str]] = {}
        #: groups not to claim from until the next listing
        self.blocked: set[str] = set()
        #: token -> candidate names taken while the group was closed, ascending
        self.parked: dict[str, list[str]] = {}
        #: ready names of groups this client claimed, whose departure the
        #: arrival feed reports as any other's
        self.taken: set[str] = set()

    def refresh(self, pending: dict[str, int]) -> None:
        """Start again from a listing's invisible names."""
        self.held, self.blocked, self.parked, self.taken = {}, set(), {}, set()
        for name in pending:
            self.hold(name)

    def hold(self, name: str) -> None:
        """An invisible name joined the view."""
        token = token_of(name)
        if token is not None and holds(name):
            self.held.setdefault(token, set()).add(name)

    def drop(self, name: str) -> str | None:
        """An invisible name left the view (deleted, renamed, or due); the token
        of its group if that group is open now (its parked names may return)."""
        token = token_of(name)
        if token is None:
            return None
        held = self.held.get(token)
        if held is not None:
            held.discard(name)
            if not held:
                del self.held[token]
        return token if self.is_open(token) else None

    def is_open(self, token: str) -> bool:
        return token not in self.held and token not in self.blocked

    def left(self, name: str, token: str) -> None:
        """The feed reports that a ready name of group ``token`` left: another
        client took it (the feed does not follow its held name), so the group
        closes until the next listing; unless this client took it."""
        if name in self.taken:
            self.taken.discard(name)
        else:
            self.block(token)

    def block(self, token: str) -> None:
        """Another client took the group's head (or this view passed over it):
        claim nothing of it until the next listing shows it again."""
        self.blocked.add(token)

    def waiting_on_news(self) -> bool:
        """Whether a group this view closed on news (another client took its
        head: a lost race, or the feed) keeps candidates parked: a listing
        tells whether it is open again. Groups held per the listing itself
        need none."""
        return any(token in self.parked for token in self.blocked)

    def park(self, token: str, name: str) -> None:
        self.parked.setdefault(token, []).append(name)

    def unpark(self, token: str) -> list[str]:
        return self.parked.pop(token, [])
