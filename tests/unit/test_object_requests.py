"""storage/requests.py: object keys are attributed to their stream and artifact; other
objects are not counted; a stream's counters start at zero and split puts from reads."""

from __future__ import annotations

import pytest

from headwater.names import object_key_component
from headwater.storage.requests import PUT, READ, RequestCounts, classify

pytestmark = pytest.mark.unit


def test_keys_are_attributed_to_their_stream_and_artifact() -> None:
    c = object_key_component("~ds/orders")
    assert classify(f"segments/{c}/1/00000010.seg") == (c, "segments")
    assert classify(f"segments/{c}/1/00000010.seg.cix") == (c, "indexes")
    assert classify(f"registries/{c}/1/r3.json") == (c, "schema")
    assert classify(f"spill/{c}/2/9-ab") == (c, "wal")
    assert classify("closures/flags/x.tar.gz") is None
    assert classify("segments/") is None and classify(f"segments/{c}") is None


def test_counts_split_puts_from_reads_per_stream() -> None:
    counts = RequestCounts()
    a, b = object_key_component("~ds/a"), object_key_component("~ds/b")
    counts.note(f"segments/{a}/1/1.seg", PUT)
    counts.note(f"segments/{a}/1/1.seg", READ)
    counts.note(f"segments/{a}/1/1.seg", READ)
    counts.note(f"segments/{a}/1/1.seg.cix", READ)
    counts.note(f"segments/{b}/1/1.seg", PUT)
    counts.note("elsewhere/x", READ)
    got = counts.of("~ds/a")
    assert got["by_artifact"]["segments"] == {"puts": 1, "reads": 2}
    assert got["by_artifact"]["indexes"] == {"puts": 0, "reads": 1}
    assert (got["puts"], got["reads"]) == (1, 3)
    assert counts.of("~ds/none")["puts"] == 0 and counts.of("~ds/none")["reads"] == 0
    assert got["scope"] == "node" and got["since"].endswith("Z")
