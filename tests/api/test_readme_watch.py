"""The README's /v0/watch example (issue 23), run as written: the request body is read from
the README itself, so the example and the server cannot drift apart again."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from api_helpers import append_data, ok, put_topic
from starlette.testclient import TestClient

pytestmark = pytest.mark.api

README = Path(__file__).resolve().parents[2] / "README.md"
HOST = "localhost:4000"


def readme_watch_example() -> tuple[list[str], str, str]:
    """The topics the README's walk-through writes to before its `POST /v0/watch` command,
    that command (continuation lines joined), and the command on the line after it."""
    lines = README.read_text(encoding="utf-8").splitlines()
    i = next(k for k, line in enumerate(lines) if "-X POST" in line and "/v0/watch" in line)
    before = "\n".join(lines[:i])
    topics = list(dict.fromkeys(re.findall(rf"-X (?:PUT|POST) {HOST}/v0/topics/(\w+) ", before)))
    command = lines[i]
    while command.endswith("\\"):
        i += 1
        command = command[:-1] + lines[i]
    return topics, command, lines[i + 1]


def test_the_readme_watch_example_creates_a_session_and_its_stream_opens(
    client: TestClient,
) -> None:
    topics, post, get = readme_watch_example()
    # GIVEN the topics the walk-through wrote to above the example, each with a record,
    # and the README's request
    target = re.search(rf"{re.escape(HOST)}(/v0/watch\S*)", post)
    body_match = re.search(r"-d '([^']*)'", post)
    assert target and body_match, post
    body: dict[str, Any] = json.loads(body_match.group(1))
    assert topics
    for topic in topics:
        put_topic(client, topic)
        append_data(client, topic, {"hello": topic})
    # WHEN the README's POST is sent as written
    answer = ok(client.post(target.group(1), json=body))
    # THEN the field the README keeps is the wid, and the README's GET opens its stream
    capture = re.fullmatch(r"(\w+)=\$\(curl .*\|\s*jq -r \.(\w+)\)", post.strip())
    assert capture, f"the README should keep the answer's wid in a variable: {post}"
    var, field = capture.groups()
    wid = answer[field]
    assert isinstance(wid, str) and wid.startswith("wid_")
    url_match = re.search(rf'"?{re.escape(HOST)}(/v0/watch/\S*?)"?(\s|$)', get)
    assert url_match and f"${var}" in url_match.group(1), get
    stream = url_match.group(1).replace(f"${var}", wid)
    assert stream == answer["stream_url"]
    accept = re.search(r"-H '([^:]+): ([^']+)'", get)
    assert accept, get
    with client.stream("GET", stream, headers={accept.group(1): accept.group(2)}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = (line[7:] for line in resp.iter_lines() if line.startswith("event: "))
        assert next(events) == "record"  # orders' record from seq 0 comes first
