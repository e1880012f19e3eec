"""One bash per markdown file: its blocks run in order and share variables (an id a block
captured with jq is there for the next one). `curl` is wrapped to report each response's
status on stderr, so a block's statuses can be checked without changing what it prints."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

STATUS_MARK = "__DOCTEST_STATUS__"
FAIL_MARK = "__DOCTEST_FAILED__"
# curl writes its -w text to stderr a character at a time, so two curls of one block (one in
# the background) would interleave their marks: each call's stderr goes to its own file and
# is copied out in one write when it ends.
# A stream the text cuts off with --max-time ends with curl's exit code 28 (operation timed
# out): that is how the docs show a live stream, not a failure.
WRAPPER = (
    "curl() { local __t; __t=$(mktemp); "
    "command curl -w '%{stderr}" + STATUS_MARK + '%{http_code}\\n\' "$@" 2>"$__t"; '
    'local rc=$?; cat "$__t" >&2; rm -f "$__t"; '
    "if [ $rc -eq 28 ] && [[ \" $* \" == *' --max-time '* ]]; then return 0; fi; "
    "return $rc; }\n"
    "export -f curl\n"
    # any command of a block that fails, not only its last one (a reader would see the error)
    "trap 'echo \"" + FAIL_MARK + "$? $BASH_COMMAND\" >&2' ERR\n"
)


@dataclass(slots=True)
class Ran:
    stdout: str
    stderr: str
    statuses: list[int]
    exit_code: int
    failed: list[str]  # commands that exited non-zero, with their exit codes


class Shell:
    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self._proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            text=True,
            bufsize=1,
        )
        self._out: queue.Queue[str] = queue.Queue()
        self._err: queue.Queue[str] = queue.Queue()
        for stream, q in ((self._proc.stdout, self._out), (self._proc.stderr, self._err)):
            threading.Thread(target=self._pump, args=(stream, q), daemon=True).start()
        self._send(WRAPPER)

    @staticmethod
    def _pump(stream: object, q: queue.Queue[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            q.put(line)

    def _send(self, text: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(text)
        self._proc.stdin.flush()

    def run(self, code: str, timeout_s: float = 60.0) -> Ran:
        """Run one block; its output up to a sentinel both streams print when it ends."""
        token = uuid.uuid4().hex
        end = f"__DOCTEST_END_{token}__"
        # a subshell would lose the block's variables: run it in this shell, in a group
        self._send(f"{{\n{code}\n}}\n__rc=$?; echo; echo {end}; echo {end}$__rc >&2\n")
        out = self._collect(self._out, end, timeout_s)
        err = self._collect(self._err, end, timeout_s)
        rc_line = err.pop() if err else f"{end}1"
        statuses: list[int] = []
        failed: list[str] = []
        kept: list[str] = []
        for line in err:
            if line.startswith(STATUS_MARK):
                statuses.append(int(line[len(STATUS_MARK) :].strip() or 0))
            elif line.startswith(FAIL_MARK):
                failed.append(line[len(FAIL_MARK) :].strip())
            else:
                kept.append(line)
        return Ran(
            "".join(out).rstrip() + "\n",
            "".join(kept),
            statuses,
            int(rc_line[len(end) :] or 1),
            failed,
        )

    @staticmethod
    def _collect(q: queue.Queue[str], end: str, timeout_s: float) -> list[str]:
        lines: list[str] = []
        while True:
            try:
                line = q.get(timeout=timeout_s)
            except queue.Empty:
                raise TimeoutError(f"block still running after {timeout_s} s") from None
            if line.startswith(end):
                if line.rstrip("\n") != end:
                    lines.append(line.rstrip("\n"))  # stderr: the exit code rides on it
                return lines
            lines.append(line)

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._send("exit\n")
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()


def shell_env(port: int) -> dict[str, str]:
    """A plain environment, with this interpreter's bin first (the `headwater` command and
    `python` of the project's venv, as after `make run`)."""
    keep = ("HOME", "LANG", "TMPDIR")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {k: os.environ[k] for k in keep if k in os.environ} | {
        "PATH": path,
        "HW_PORT": str(port),
        # the `headwater` command's server (its default is make run's 127.0.0.1:4000)
        "HEADWATER_URL": f"http://127.0.0.1:{port}",
    }
