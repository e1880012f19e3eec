"""The docs test's matcher (tests/docs_examples/markdown.py) fails where the text and the
output differ, and only there: each rule of its `…` elisions, and the pairing of a command
block with the output block after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_examples.markdown import examples, json_mismatch, text_mismatch


@pytest.mark.parametrize(
    ("expect", "printed"),
    [
        ('{"seqs": [1, 2], "deduped": false}', '{"seqs":[1,2],"deduped":false}'),
        ('{"seqs": [1, 2], …}', '{"seqs":[1,2],"deduped":false,"head_seq":2}'),
        ('{"id": …, "n": 1}', '{"id":"wid_9f2","n":1}'),
        ('{"hash": "sha256:…"}', '{"hash":"sha256:abcdef"}'),
        ('{"items": [1, …]}', '{"items":[1,2,3]}'),
        ('{"a": 1}', '{"a":1,"performance":{"server_total_ms":1.2}}'),
        ('{"a": 1}\n{"b": [true, …]}', '{"a":1}\n{"b":[true,false]}'),
    ],
)
def test_json_that_matches(expect: str, printed: str) -> None:
    assert json_mismatch(expect, printed) is None


@pytest.mark.parametrize(
    ("expect", "printed", "why"),
    [
        ('{"seqs": [1, 2]}', '{"seqs":[1,3]}', "expected 2, got 3"),
        ('{"seqs": [1, 2]}', '{"seqs":[1,2],"x":0}', "unexpected keys ['x']"),
        ('{"seqs": [1, 2]}', '{"seq":[1,2]}', "missing key 'seqs'"),
        ('{"n": 1}', '{"n":1.0}', "expected 1, got 1.0"),
        ('{"n": 1}', '{"n":"1"}', 'expected 1, got "1"'),
        ('{"items": [1, …]}', '{"items":[]}', "expected 1+ items"),
        ('{"items": [1]}', '{"items":[1,2]}', "expected 1 items, got 2"),
        ('{"hash": "sha256:…"}', '{"hash":"md5:x"}', "expected 'sha256:…'"),
        ('{"a": 1}', '{"a":1}\n{"a":1}', "expected 1 JSON values"),
        ('{"a": 1}', "Internal Server Error", "not JSON"),
    ],
)
def test_json_that_differs_is_reported(expect: str, printed: str, why: str) -> None:
    got = json_mismatch(expect, printed)
    assert got is not None and why in got, got


def test_text_is_a_prefix_of_lines_with_elisions() -> None:
    printed = 'event: record\nid: 1\ndata: {"x":1}\n\nevent: heartbeat\n: keepalive\n'
    assert text_mismatch("event: record\nid: …\n", printed) is None
    assert text_mismatch("event: record\n…\nevent: heartbeat", printed) is None
    assert text_mismatch("event: record\n…", printed) is None
    assert "expected 'event: caught-up'" in str(text_mismatch("event: caught-up", printed))
    longer = "event: record\nid: 1\ndata: …\nevent: heartbeat\n: keepalive\nevent: record"
    assert "the output ended" in str(text_mismatch(longer, printed))


def test_blocks_pair_with_the_output_block_right_after_them(tmp_path: Path) -> None:
    md = tmp_path / "page.md"
    md.write_text(
        'Intro.\n\n```sh\ncurl -s localhost:4000/a\n```\n\n```json status=404\n{"error": …}\n```\n'
        "\nProse between breaks the pairing.\n\n```sh\ncurl -s localhost:4000/b\n```\n\nText.\n\n"
        "```json\n{}\n```\n\n```sh\n# not run by the docs test: needs AWS\nsam deploy\n```\n"
        "```python\nprint(1)\n```\n"
    )
    a, b, c = examples(md, tmp_path)
    assert (a.line, a.expect_kind, a.expect, a.status) == (3, "json", '{"error": …}', 404)
    assert (b.expect_kind, b.expect) == (None, None)  # prose between: no claimed output
    assert c.skip == "needs AWS" and c.code.endswith("sam deploy")
    assert a.id == "page.md:3"
