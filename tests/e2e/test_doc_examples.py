"""Every command block of README.md and docs/*.md runs against a live `make run` server (one
fresh server per file, started the way `make run` starts it: its own emulator, the example
notification schema and flag tokens), in order, in one shell per file, and what it prints is
what the text shows after it (tests/docs_examples/markdown.py: `…` elisions, `status=NNN`).
A block marked `# not run by the docs test: <reason>` is skipped with that reason."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from headwater.dev.emulator import die_with_parent, free_port
from tests.docs_examples.markdown import Example, examples, json_mismatch, text_mismatch
from tests.docs_examples.shell import Shell, shell_env

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK_TIMEOUT_S = 60.0


def _collect() -> list[Example]:
    found: list[Example] = []
    for page in PAGES:
        found += examples(page, REPO)
    return found


EXAMPLES = _collect()


class Page:
    """One file's server and shell."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.log = tmp / f"server-{self.port}.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_ENDPOINT_URL", "TOPICS_", "HEADWATER_"))
        }
        env |= {"TOPICS_PORT": str(self.port), "TOPICS_HOST": "127.0.0.1"}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "headwater.dev.server"],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v0/health", timeout=1).is_success:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not healthy: {self.log.read_text()}")
            time.sleep(0.2)
        self.shell = Shell(shell_env(self.port), str(tmp))

    def close(self) -> None:
        self.shell.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Page]]:
    opened: dict[str, Page] = {}
    try:
        yield opened
    finally:
        for page in opened.values():
            page.close()


def _localized(code: str, port: int) -> str:
    for host in ("localhost:4000", "127.0.0.1:4000"):
        code = code.replace(host, f"127.0.0.1:{port}")
    return code


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_doc_example(
    example: Example, pages: dict[str, Page], tmp_path_factory: pytest.TempPathFactory
) -> None:
    if example.skip is not None:
        pytest.skip(f"{example.id}: {example.skip}")
    page = pages.get(example.path)
    if page is None:
        page = pages[example.path] = Page(tmp_path_factory.mktemp("docpage"))
    ran = page.shell.run(_localized(example.code, page.port), BLOCK_TIMEOUT_S)
    context = f"{example.id}\n--- block\n{example.code}\n--- printed\n{ran.stdout}{ran.stderr}"
    assert ran.exit_code == 0, f"exit code {ran.exit_code}\n{context}"
    assert not ran.failed, f"commands failed: {ran.failed}\n{context}"
    statuses = ran.statuses
    if example.status is not None:
        assert statuses, f"no request answered\n{context}"
        assert statuses[-1] == example.status, f"status {statuses[-1]}\n{context}"
        statuses = statuses[:-1]
    bad = [s for s in statuses if not 100 <= s < 400]
    assert not bad, f"statuses {ran.statuses}\n{context}"
    if example.expect_kind == "json":
        why = json_mismatch(example.expect or "", ran.stdout)
        assert why is None, f"{why}\n{context}"
    elif example.expect_kind == "text":
        why = text_mismatch(example.expect or "", ran.stdout)
        assert why is None, f"{why}\n{context}"
