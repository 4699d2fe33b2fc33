from __future__ import annotations

import pickle

import pytest

import vsqs

ERRORS = [
    getattr(vsqs, name)
    for name in vsqs.__all__
    if isinstance(getattr(vsqs, name), type) and issubclass(getattr(vsqs, name), vsqs.VsqsError)
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.__name__)
def test_errors_survive_pickling(error: type[vsqs.VsqsError]) -> None:
    original = error("what went wrong")
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is error and str(copy) == "what went wrong"
    assert isinstance(copy, vsqs.VsqsError)
