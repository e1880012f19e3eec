"""The index catalogue adapter (storage/index_catalogue.py) against every backend: coverage
moves only from what a builder read, racing builders cannot publish over each other, a
publish retried after its answer was lost counts as applied, and incarnations are apart."""

from __future__ import annotations

import pytest
from adapter_helpers import Backend

from headwater.engine.ports.catalogue import Catalogue, IndexCatalogueStore

pytestmark = pytest.mark.adapters


def _cat(b: Backend) -> IndexCatalogueStore:
    return b.catalogue


def test_first_publish_then_moves_only_from_what_was_read(backend: Backend) -> None:
    cat = _cat(backend)
    # GIVEN no catalogue for the stream
    assert cat.get("t", 1) is None
    first = Catalogue("g1", covered_through=0, segments=0, bytes=0, updated_ms=5)
    # WHEN two builders both try to create it, only one wins
    assert cat.publish("t", 1, None, first) is True
    assert cat.publish("t", 1, None, Catalogue("g1", 40, 1, 100, 6)) is False
    assert cat.get("t", 1) == first
    # WHEN one builder moves it forward from what it read
    nxt = Catalogue("g1", covered_through=40, segments=1, bytes=123, updated_ms=7)
    assert cat.publish("t", 1, first, nxt) is True
    # THEN a builder that read the old state loses and nothing it sent applies
    assert cat.publish("t", 1, first, Catalogue("g1", 80, 2, 999, 8)) is False
    assert cat.get("t", 1) == nxt
    # ...and a new plan generation resets coverage from the state it read
    reset = Catalogue("g2", covered_through=0, segments=0, bytes=0, updated_ms=9)
    assert cat.publish("t", 1, nxt, reset) is True
    assert cat.get("t", 1) == reset


def test_incarnations_and_streams_are_apart_and_delete_forgets(backend: Backend) -> None:
    cat = _cat(backend)
    a = Catalogue("g", 10, 1, 1, 1)
    assert cat.publish("t", 1, None, a)
    assert cat.get("t", 2) is None
    assert cat.get("u", 1) is None
    cat.delete("t", 1)
    assert cat.get("t", 1) is None
    cat.delete("t", 1)  # deleting what is gone is fine


def test_a_publish_whose_answer_was_lost_is_recognised_as_applied(backend: Backend) -> None:
    # GIVEN a publish whose first attempt applies but whose answer is lost, so the adapter
    # re-sends the same request, whose condition then fails on its own write
    start = Catalogue("g", 0, 0, 0, 1)
    assert _cat(backend).publish("t", 1, None, start)
    lossy = backend.lossy(False)
    lossy.lose_next("publish")
    moved = Catalogue("g", 40, 1, 10, 2)
    # WHEN it is published THEN the adapter reports it applied (not a lost race), once
    assert lossy.catalogue.publish("t", 1, start, moved) is True
    assert _cat(backend).get("t", 1) == moved
    # AND a builder that read the old state still loses
    assert _cat(backend).publish("t", 1, start, Catalogue("g", 50, 2, 20, 3)) is False


def test_lexicon_runs_are_kept_and_guard_the_publish(backend: Backend) -> None:
    cat = _cat(backend)
    # GIVEN a catalogue covering 32 segments, no runs yet
    base = Catalogue("g", 320, 32, 1000, 1)
    assert cat.publish("t", 1, None, base)
    # WHEN a compaction adds two runs
    ran = Catalogue(
        "g", 320, 32, 1000, 2, runs=((1, 160, "0001-0160-ab"), (161, 320, "0311-0320-cd"))
    )
    assert cat.publish("t", 1, base, ran) is True
    # THEN they read back in order, and a builder that read the state without them loses
    assert cat.get("t", 1) == ran
    assert cat.publish("t", 1, base, Catalogue("g", 330, 33, 1100, 3)) is False
    # ...while one that read them moves coverage on, keeping them
    on = Catalogue("g", 330, 33, 1100, 3, runs=ran.runs)
    assert cat.publish("t", 1, ran, on) is True
    assert cat.get("t", 1) == on
    # ...and a reset (a new plan) drops them
    assert cat.publish("t", 1, on, Catalogue("g2", 0, 0, 0, 4)) is True
    got = cat.get("t", 1)
    assert got is not None and got.runs == ()
