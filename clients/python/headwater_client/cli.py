"""The `headwater` command: topics, append, tail, queues, workers and Durable Streams from a
shell. Global options come before the command: `headwater --url URL --key KEY tail orders -f`.

Output: tables and progress (rich) when stdout is a terminal; one JSON object per line when
it is not, or with `--json` (`--pretty` forces the tables). Errors go to stderr with the
server's code and message; the exit status is 1 for an error answer, 3 when the server
cannot be reached (2 is a usage error)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from headwater_client.client import DEFAULT_URL, Client
from headwater_client.errors import ApiError, ConnectionFailed, HeadwaterError
from headwater_client.models import Job, Record, Tombstone
from headwater_client.worker import JobOutcome

__all__ = ["app", "main"]

EXIT_API_ERROR = 1
EXIT_UNREACHABLE = 3

app = typer.Typer(
    name="headwater",
    help="Headwater from the shell: topics, append, tail, queues and Durable Streams.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
topic_app = typer.Typer(help="One topic: show, create, delete.", no_args_is_help=True)
ds_app = typer.Typer(
    help="Durable Streams on /v1: create, read, append, search.", no_args_is_help=True
)
app.add_typer(topic_app, name="topic")
app.add_typer(ds_app, name="ds")


def cli_node() -> str:
    """The CLI's default worker identity: stable across invocations on one host, so a
    `claim` and a later `ack` agree."""
    return f"cli@{socket.gethostname()}"


@dataclass
class State:
    url: str
    key: str | None
    node: str
    json_mode: bool
    timeout: float
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.url, self.key, node=self.node, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # --- output ---------------------------------------------------------------------------
    @property
    def out(self) -> Console:
        return Console(soft_wrap=True)  # sys.stdout as it is now (tests swap it)

    @property
    def err(self) -> Console:
        return Console(stderr=True, soft_wrap=True)

    def line(self, obj: Any, stream: IO[str] | None = None) -> None:
        target = stream if stream is not None else sys.stdout
        target.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        target.flush()

    def note(self, text: str, obj: dict[str, Any] | None = None) -> None:
        """A message for the person at the terminal (stderr): JSON in JSON mode."""
        if self.json_mode:
            self.line(obj if obj is not None else {"note": text}, sys.stderr)
        else:
            self.err.print(text, highlight=False)

    def fail(self, message: str, code: int = EXIT_API_ERROR) -> NoReturn:
        if self.json_mode:
            self.line({"error": {"message": message}}, sys.stderr)
        else:
            self.err.print(f"[red]error:[/red] {escape(message)}", highlight=False)
        raise typer.Exit(code)


def _state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


@contextlib.contextmanager
def handled(st: State) -> Iterator[None]:
    """Client errors become a message on stderr and an exit status."""
    try:
        yield
    except ApiError as exc:
        if st.json_mode:
            err: dict[str, Any] = {"status": exc.status, "code": exc.code, "message": exc.message}
            if exc.detail is not None:
                err["detail"] = exc.detail
            st.line({"error": err}, sys.stderr)
        else:
            st.err.print(
                f"[red]error:[/red] {exc.status} {escape(exc.code)}: {escape(exc.message)}",
                highlight=False,
            )
            if exc.detail is not None:
                st.err.print(f"  detail: {escape(json.dumps(exc.detail))}", highlight=False)
        raise typer.Exit(EXIT_API_ERROR) from None
    except ConnectionFailed as exc:
        st.fail(f"cannot reach {st.url}: {exc.cause or exc}", EXIT_UNREACHABLE)
    finally:
        st.close()


@app.callback()
def _options(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Option("--url", envvar="HEADWATER_URL", help="Server base URL.")
    ] = DEFAULT_URL,
    key: Annotated[
        str | None,
        typer.Option("--key", envvar="HEADWATER_KEY", help="Bearer api key.", show_default=False),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            envvar="HEADWATER_NODE",
            help="Worker identity for claim/ack/nack/extend/work (default cli@<host>).",
            show_default=False,
        ),
    ] = None,
    json_mode: Annotated[
        bool | None,
        typer.Option(
            "--json/--pretty",
            help="JSON lines, or tables. Default: tables on a terminal, JSON otherwise.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Request timeout in seconds.")] = 30.0,
) -> None:
    if json_mode is None:
        json_mode = not sys.stdout.isatty()
    ctx.obj = State(url, key, node or cli_node(), json_mode, timeout)


# --- topics ----------------------------------------------------------------------------------
@app.command()
def topics(
    ctx: typer.Context,
    prefix: Annotated[str, typer.Option(help="Only topics starting with this.")] = "",
) -> None:
    """List topics."""
    st = _state(ctx)
    with handled(st):
        found = st.client().list_topics(prefix)
        if st.json_mode:
            for t in found:
                st.line(t.to_json())
            return
        table = Table(
            Column("topic", no_wrap=True),
            "head_seq",
            "earliest_seq",
            "count",
            "bytes",
            "durable",
            "priority",
        )
        for t in found:
            table.add_row(
                escape(t.topic),
                str(t.head_seq),
                str(t.earliest_seq),
                str(t.count),
                str(t.bytes),
                "yes" if t.durable else "",
                str(t.effective_priority),
            )
        st.out.print(table)
        st.err.print(f"{len(found)} topic(s)", highlight=False)


def _print_object(st: State, obj: dict[str, Any]) -> None:
    if st.json_mode:
        st.line(obj)
    else:
        st.out.print_json(json.dumps(obj))


@topic_app.command("show")
def topic_show(ctx: typer.Context, topic: str) -> None:
    """A topic's state (queues include their counters)."""
    st = _state(ctx)
    with handled(st):
        state = st.client().get_topic(topic)
        body = dict(state.raw)
        body.pop("performance", None)
        _print_object(st, body)


def _json_arg(st: State, text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        st.fail(f"{what} is not valid JSON ({exc}); quote strings, e.g. '\"hello\"'", 2)


@topic_app.command("create")
def topic_create(
    ctx: typer.Context,
    topic: str,
    queue: Annotated[bool, typer.Option("--queue", help="Make it a work queue.")] = False,
    config: Annotated[
        str | None, typer.Option(help="Config fields as a JSON object.", show_default=False)
    ] = None,
    lease_ms: Annotated[int | None, typer.Option(show_default=False)] = None,
    max_deliveries: Annotated[int | None, typer.Option(show_default=False)] = None,
    dead_letter: Annotated[str | None, typer.Option(show_default=False)] = None,
) -> None:
    """Create (or reconfigure) a topic or a queue."""
    st = _state(ctx)
    cfg = _json_arg(st, config, "--config") if config else {}
    if not isinstance(cfg, dict):
        st.fail("--config must be a JSON object", 2)
    with handled(st):
        hw = st.client()
        if queue or lease_ms is not None or max_deliveries is not None or dead_letter:
            result = hw.create_queue(
                topic,
                lease_ms=lease_ms,
                max_deliveries=max_deliveries,
                dead_letter=dead_letter,
                config=cfg,
            )
        else:
            result = hw.create_topic(topic, cfg)
        _print_object(
            st, {"topic": result.topic, "created": result.created, "config": result.config}
        )


@topic_app.command("delete")
def topic_delete(
    ctx: typer.Context,
    topic: str,
    if_empty: Annotated[bool, typer.Option(help="Only when it holds no records.")] = False,
) -> None:
    """Delete a topic (and the routers that read or feed it)."""
    st = _state(ctx)
    with handled(st):
        r = st.client().delete_topic(topic, if_empty=if_empty)
        _print_object(
            st, {"topic": r.topic, "deleted": r.deleted, "routers_removed": r.routers_removed}
        )


# --- append ----------------------------------------------------------------------------------
def _stdin_values(st: State, raw: bool) -> Iterator[Any]:
    for n, line in enumerate(sys.stdin, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        if raw:
            yield text
            continue
        try:
            yield json.loads(text)
        except ValueError as exc:
            st.fail(f"stdin line {n} is not valid JSON ({exc}); use --raw for plain text", 2)


def _batches(values: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for value in values:
        batch.append(value)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


@app.command()
def append(
    ctx: typer.Context,
    topic: str,
    data: Annotated[
        str | None,
        typer.Argument(
            help="A JSON value; '-' or nothing reads one JSON value per stdin line.",
            show_default=False,
        ),
    ] = None,
    tag: Annotated[
        str | None, typer.Option(help="Tag of every record.", show_default=False)
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            "--idempotency-key",
            help="Idempotency key: a retry with the same key is not written twice "
            "(from stdin, batch N uses KEY:N, so a rerun of the same input dedupes).",
            show_default=False,
        ),
    ] = None,
    meta: Annotated[
        str | None, typer.Option(help="Meta of every record (a JSON object).", show_default=False)
    ] = None,
    raw: Annotated[bool, typer.Option(help="Take the data as a plain string.")] = False,
    batch: Annotated[int, typer.Option(min=1, max=1000, help="Records per request.")] = 100,
) -> None:
    """Append records: DATA as one record, or each stdin line as one."""
    st = _state(ctx)
    meta_obj = _json_arg(st, meta, "--meta") if meta else None
    if meta_obj is not None and not isinstance(meta_obj, dict):
        st.fail("--meta must be a JSON object", 2)
    from_stdin = data is None or data == "-"
    if not from_stdin:
        values: Iterator[Any] = iter([data if raw else _json_arg(st, data or "", "DATA")])
    else:
        values = _stdin_values(st, raw)
    with handled(st):
        hw = st.client()
        total = deduped = 0
        first_seq = last_seq = None
        # A spinner while stdin streams in, for a person watching; the lines per batch are
        # then replaced by one summary (a spinner and stdout lines would interleave).
        progress = None
        if from_stdin and not st.json_mode and sys.stderr.isatty():
            progress = st.err.status("appending…")
            progress.start()
        try:
            for n, records in enumerate(_batches(values, batch)):
                batch_key = f"{key}:{n}" if key and from_stdin else key
                result = hw.append(
                    topic, records, tag=tag, meta=meta_obj, idempotency_key=batch_key
                )
                total += result.count
                deduped += result.count if result.deduped else 0
                first_seq = result.first_seq if first_seq is None else first_seq
                last_seq = result.last_seq
                if st.json_mode:
                    st.line(result.to_json())
                elif progress is not None:
                    progress.update(f"appended {total} record(s)…")
                else:
                    note = " [yellow](deduped: already appended)[/yellow]" if result.deduped else ""
                    st.out.print(
                        f"{escape(topic)}: seqs {result.first_seq}..{result.last_seq}"
                        f" ({result.count} record(s)){note}",
                        highlight=False,
                    )
        finally:
            if progress is not None:
                progress.stop()
        if total == 0:
            st.fail("nothing to append (no DATA and no stdin lines)", 2)
        if progress is not None:
            note = f" [yellow]({deduped} deduped: already appended)[/yellow]" if deduped else ""
            st.out.print(
                f"{escape(topic)}: appended {total} record(s), seqs {first_seq}..{last_seq}{note}",
                highlight=False,
            )


# --- tail ------------------------------------------------------------------------------------
def _read_state_file(path: Path, topic: str) -> int | None:
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    if (
        isinstance(body, dict)
        and body.get("topic") == topic
        and isinstance(body.get("from_seq"), int)
    ):
        return int(body["from_seq"])
    return None


def _write_state_file(path: Path, topic: str, from_seq: int) -> None:
    """Atomically: a crash leaves the old cursor or the new one, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump({"topic": topic, "from_seq": from_seq}, f)
    os.replace(tmp, path)


class _Tail:
    """Prints records, remembers the cursor (the last printed seq), stops at --max-records."""

    def __init__(
        self, st: State, topic: str, cursor: int, state_file: Path | None, max_records: int | None
    ) -> None:
        self.st, self.topic, self.cursor = st, topic, cursor
        self.state_file, self.left = state_file, max_records

    @property
    def done(self) -> bool:
        return self.left is not None and self.left <= 0

    def records(self, records: list[Record], next_from_seq: int) -> None:
        printed = records
        if self.left is not None and len(records) >= self.left:
            printed = records[: self.left]
            next_from_seq = printed[-1].seq if printed else self.cursor
        for rec in printed:
            if self.st.json_mode:
                self.st.line(rec.to_json())
            else:
                self.st.out.print_json(json.dumps(rec.to_json()), indent=None)
        if self.left is not None:
            self.left -= len(printed)
        self.advance(next_from_seq)

    def advance(self, seq: int) -> None:
        if seq > self.cursor:
            self.cursor = seq
            if self.state_file is not None:
                _write_state_file(self.state_file, self.topic, seq)

    def tombstone(self, tomb: Tombstone) -> None:
        self.st.note(
            f"[yellow]records {tomb.gap_from}..{tomb.gap_to} are gone ({tomb.reason})[/yellow]",
            {
                "tombstone": {
                    "topic": self.topic,
                    "reason": tomb.reason,
                    "gap_from": tomb.gap_from,
                    "gap_to": tomb.gap_to,
                }
            },
        )
        self.advance(tomb.gap_to)


@app.command()
def tail(
    ctx: typer.Context,
    topic: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following.")] = False,
    from_seq: Annotated[
        int, typer.Option("--from", min=0, help="Records after this seq (0: from the start).")
    ] = 0,
    last: Annotated[
        int | None,
        typer.Option(
            "--last", "-n", min=0, help="Start N records before the head.", show_default=False
        ),
    ] = None,
    state_file: Annotated[
        Path | None,
        typer.Option(
            "--state",
            help="Cursor file: read at start, written after each batch "
            "(a rerun resumes where the last one stopped).",
            show_default=False,
        ),
    ] = None,
    poll: Annotated[bool, typer.Option(help="Follow by long-poll instead of watch (SSE).")] = False,
    max_records: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many records.", show_default=False)
    ] = None,
    tags: Annotated[bool, typer.Option(help="Include $tag.")] = False,
    exclude_node: Annotated[
        str | None, typer.Option(help="Skip records written by this node.", show_default=False)
    ] = None,
) -> None:
    """Print a topic's records as JSON lines; with -f keep following (resumable)."""
    st = _state(ctx)
    with handled(st):
        hw = st.client()
        start = from_seq
        if state_file is not None:
            saved = _read_state_file(state_file, topic)
            if saved is not None:
                start = saved
        if last is not None and (state_file is None or _read_state_file(state_file, topic) is None):
            head = hw.get_topic(topic, touch=False).head_seq
            start = max(0, head - last)
        t = _Tail(st, topic, start, state_file, max_records)
        try:
            if not follow:
                hw.get_topic(topic, touch=False)  # a missing topic is an error, not silence
                while not t.done:
                    before = t.cursor
                    d = hw.diff(topic, t.cursor, include_tags=tags, node=exclude_node)
                    if d.tombstone is not None:
                        t.tombstone(d.tombstone)
                    t.records(d.records, d.next_from_seq)
                    if d.caught_up or t.cursor <= before:
                        break
            elif poll:
                hw.get_topic(topic, touch=False)
                for d in hw.follow(
                    topic, t.cursor, include_tags=tags, node=exclude_node, stop=lambda: t.done
                ):
                    if d.tombstone is not None:
                        t.tombstone(d.tombstone)
                    t.records(d.records, d.next_from_seq)
                    if t.done:
                        break
            else:
                with hw.watch({topic: t.cursor}, include_tags=tags, node=exclude_node) as stream:
                    for event in stream:
                        if event.kind == "record":
                            to_seq = int(event.data.get("to_seq", t.cursor))
                            t.records(event.records, to_seq)
                        elif event.kind == "tombstone" and event.tombstone is not None:
                            t.tombstone(event.tombstone)
                        elif event.kind == "topic-deleted":
                            st.note(f"topic {escape(topic)} was deleted", {"topic_deleted": topic})
                            break
                        elif event.kind == "error":
                            st.note(
                                f"server: {escape(json.dumps(event.data))}",
                                {"server_error": event.data},
                            )
                        if t.done:
                            break
        except KeyboardInterrupt:
            st.note(f"stopped; resume with --from {t.cursor}", {"resume_from": t.cursor})
            raise typer.Exit(130) from None


# --- queues ----------------------------------------------------------------------------------
def _print_jobs(st: State, jobs: list[Job]) -> None:
    if st.json_mode:
        for job in jobs:
            st.line(job.to_json())
        return
    table = Table(
        Column("seq", no_wrap=True),
        Column("lease_id", no_wrap=True),
        "deliveries",
        "deadline",
        "tag",
        "data",
    )
    for job in jobs:
        table.add_row(
            str(job.seq),
            job.lease_id,
            str(job.deliveries),
            str(job.deadline),
            escape(job.tag or ""),
            escape(json.dumps(job.data)),
        )
    st.out.print(table)


@app.command()
def claim(
    ctx: typer.Context,
    queue: str,
    max_jobs: Annotated[int, typer.Option("--max", min=1, help="Jobs to claim.")] = 1,
    lease_ms: Annotated[
        int | None, typer.Option(help="Lease duration (default: the queue's).", show_default=False)
    ] = None,
) -> None:
    """Lease jobs of a queue to --node (POST /v0/topics/QUEUE/claim)."""
    st = _state(ctx)
    with handled(st):
        result = st.client().claim(queue, max_jobs=max_jobs, lease_ms=lease_ms)
        _print_jobs(st, result.jobs)
        st.note(
            f"claimed {len(result.jobs)} job(s) as {escape(st.node)}; {result.ready} ready",
            {"claimed": len(result.jobs), "ready": result.ready, "node": st.node},
        )


def _lease_op(st: State, verb: str, done: int, skipped: list[int], extra: dict[str, Any]) -> None:
    body = {verb: done, "skipped": skipped, **extra}
    if st.json_mode:
        st.line(body)
    else:
        st.out.print(
            f"{verb} {done}" + (f", skipped {skipped}" if skipped else ""), highlight=False
        )
    if skipped:
        st.fail(
            f"not held by {st.node}: {', '.join(map(str, skipped))} (expired, re-claimed, "
            "already acked, or claimed with another --node)"
        )


JobsArg = Annotated[list[int], typer.Argument(help="Job seqs.")]
LeaseIdsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--lease-id", help="Fence with the claim's lease id (one per job).", show_default=False
    ),
]


@app.command()
def ack(ctx: typer.Context, queue: str, jobs: JobsArg, lease_id: LeaseIdsOpt = None) -> None:
    """Finish jobs (POST /v0/topics/QUEUE/ack)."""
    st = _state(ctx)
    with handled(st):
        r = st.client().ack(queue, jobs, lease_ids=lease_id or None)
        _lease_op(st, "acked", r.done, r.skipped, {"ready": r.ready, "in_flight": r.in_flight})


@app.command()
def nack(
    ctx: typer.Context,
    queue: str,
    jobs: JobsArg,
    delay_ms: Annotated[int, typer.Option(min=0, help="Claimable again after this.")] = 0,
    lease_id: LeaseIdsOpt = None,
) -> None:
    """Give jobs back (POST /v0/topics/QUEUE/nack)."""
    st = _state(ctx)
    with handled(st):
        r = st.client().nack(queue, jobs, delay_ms=delay_ms, lease_ids=lease_id or None)
        _lease_op(st, "nacked", r.done, r.skipped, {"ready": r.ready, "in_flight": r.in_flight})


@app.command()
def extend(
    ctx: typer.Context,
    queue: str,
    jobs: JobsArg,
    lease_ms: Annotated[int, typer.Option(min=1, help="New lease, from now.")] = 30_000,
    lease_id: LeaseIdsOpt = None,
) -> None:
    """Push lease deadlines out (POST /v0/topics/QUEUE/extend)."""
    st = _state(ctx)
    with handled(st):
        r = st.client().extend(queue, jobs, lease_ms, lease_ids=lease_id or None)
        deadlines = {str(k): v for k, v in r.deadlines.items()}
        _lease_op(st, "extended", r.extended, r.skipped, {"deadlines": deadlines})


class CommandFailed(Exception):
    def __init__(self, returncode: int) -> None:
        super().__init__(f"command exited with status {returncode}")
        self.returncode = returncode


def _fileno(stream: IO[str]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return None


def _pump(src: IO[bytes], dst: IO[str]) -> None:
    for chunk in iter(lambda: src.readline(), b""):
        dst.write(chunk.decode("utf-8", errors="replace"))
        dst.flush()


def run_command(command: list[str], job: Job, full: bool, timeout_s: float | None) -> int:
    """Run `command` with the job's payload on stdin; its output goes to ours."""
    payload = json.dumps(job.to_json() if full else job.data, ensure_ascii=False) + "\n"
    env = {
        **os.environ,
        "HEADWATER_JOB_TOPIC": job.topic,
        "HEADWATER_JOB_SEQ": str(job.seq),
        "HEADWATER_JOB_LEASE_ID": job.lease_id,
        "HEADWATER_JOB_DELIVERIES": str(job.deliveries),
    }
    if job.tag is not None:
        env["HEADWATER_JOB_TAG"] = job.tag
    sys.stdout.flush()
    sys.stderr.flush()
    out_fd, err_fd = _fileno(sys.stdout), _fileno(sys.stderr)
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=out_fd if out_fd is not None else subprocess.PIPE,
        stderr=err_fd if err_fd is not None else subprocess.PIPE,
        env=env,
    )
    pumps = [
        threading.Thread(target=_pump, args=(pipe, dst), daemon=True)
        for pipe, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))
        if pipe is not None
    ]
    for p in pumps:
        p.start()
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(payload.encode())
        proc.stdin.close()
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = -signal.SIGKILL
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    for p in pumps:
        p.join()
    return rc


@app.command(context_settings={"ignore_unknown_options": True})
def work(
    ctx: typer.Context,
    queue: str,
    command: Annotated[list[str], typer.Argument(help="The command to run per job (after --).")],
    lease_ms: Annotated[
        int,
        typer.Option(
            min=100, help="Lease per job; extended every third of it while the command runs."
        ),
    ] = 30_000,
    retry_delay_ms: Annotated[int, typer.Option(min=0, help="nack delay for a failed job.")] = 0,
    max_jobs: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many jobs.", show_default=False)
    ] = None,
    until_empty: Annotated[bool, typer.Option(help="Stop when no job is ready.")] = False,
    job_timeout: Annotated[
        float | None,
        typer.Option(
            help="Kill a command after this many seconds (the job is nacked).", show_default=False
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option(
            help="Send the whole job (seq, tag, meta, lease) on stdin instead of its data."
        ),
    ] = False,
    poll_interval: Annotated[float, typer.Option(help="Seconds between claims when idle.")] = 0.5,
) -> None:
    """Run COMMAND for each job of QUEUE: the job's data (JSON) on its stdin, HEADWATER_JOB_*
    in its environment. Exit status 0 acks the job; anything else nacks it (it comes back, or
    goes to the queue's dead_letter topic after max_deliveries)."""
    st = _state(ctx)
    if not command:
        st.fail("give the command after --, e.g. headwater work jobs -- ./handle.sh", 2)

    def handler(job: Job) -> int:
        rc = run_command(command, job, full, job_timeout)
        if rc != 0:
            raise CommandFailed(rc)
        return rc

    def report(o: JobOutcome) -> None:
        rc = (
            o.error.returncode
            if isinstance(o.error, CommandFailed)
            else (0 if o.error is None else None)
        )
        body = {
            "job": o.job.seq,
            "status": o.status,
            "exit_code": rc,
            "deliveries": o.job.deliveries,
            "extensions": o.extensions,
            "elapsed_s": round(o.elapsed_s, 3),
        }
        colour = {"acked": "green", "nacked": "red", "lost": "yellow"}[o.status]
        st.note(
            f"job {o.job.seq} [{colour}]{o.status}[/{colour}] (exit {rc}, "
            f"delivery {o.job.deliveries}, {o.elapsed_s:.2f}s)",
            body,
        )

    with handled(st):
        worker = st.client().worker(
            queue,
            handler,
            lease_ms=lease_ms,
            nack_delay_ms=retry_delay_ms,
            poll_interval_s=poll_interval,
            on_outcome=report,
        )
        try:
            stats = worker.run(max_jobs=max_jobs, until_empty=until_empty)
        except KeyboardInterrupt:
            st.note("interrupted: the job in hand was nacked", {"interrupted": True})
            raise typer.Exit(130) from None
        st.note(
            f"processed {stats.processed}: acked {stats.acked}, nacked {stats.nacked}, "
            f"lost {stats.lost}",
            {
                "processed": stats.processed,
                "acked": stats.acked,
                "nacked": stats.nacked,
                "lost": stats.lost,
            },
        )


# --- Durable Streams (/v1) -------------------------------------------------------------------
@ds_app.command("create")
def ds_create(
    ctx: typer.Context,
    stream: str,
    content_type: Annotated[
        str, typer.Option(help="The stream's content type.")
    ] = "application/json",
    ttl: Annotated[
        int | None, typer.Option(help="Idle TTL in seconds.", show_default=False)
    ] = None,
) -> None:
    """Create a stream (PUT /v1/stream/STREAM)."""
    st = _state(ctx)
    with handled(st):
        r = st.client().streams.create(stream, content_type=content_type, ttl_s=ttl)
        _print_object(st, {"stream": stream, "created": r.created, "next_offset": r.next_offset})


@ds_app.command("append")
def ds_append(
    ctx: typer.Context,
    stream: str,
    data: Annotated[
        str | None,
        typer.Argument(
            help="One entry (JSON for a JSON stream); '-' or nothing: stdin, one "
            "entry per line (a byte stream takes stdin whole).",
            show_default=False,
        ),
    ] = None,
    content_type: Annotated[
        str | None, typer.Option(help="Content type (default: the stream's).", show_default=False)
    ] = None,
    create: Annotated[bool, typer.Option(help="Create the stream first if it is missing.")] = False,
    key: Annotated[
        str | None,
        typer.Option(help="Stream-Key (routing key) of the entries.", show_default=False),
    ] = None,
) -> None:
    """Append entries to a stream (POST /v1/stream/STREAM)."""
    st = _state(ctx)
    with handled(st):
        ds = st.client().streams
        if create:
            ds.create(stream, content_type=content_type or "application/json")
        ctype = content_type or ds.head(stream).content_type
        is_json = ctype.split(";", 1)[0].strip().lower() == "application/json"
        if is_json:
            if data is not None and data != "-":
                items = [_json_arg(st, data, "DATA")]
            else:
                items = list(_stdin_values(st, raw=False))
            if not items:
                st.fail("nothing to append", 2)
            r = ds.append_json(stream, items, key=key)
            count = len(items)
        else:
            body = data.encode() if data is not None and data != "-" else sys.stdin.buffer.read()
            if not body:
                st.fail("nothing to append", 2)
            r = ds.append(stream, body, content_type=ctype, key=key)
            count = 1
        _print_object(st, {"stream": stream, "appended": count, "next_offset": r.next_offset})


@ds_app.command("read")
def ds_read(
    ctx: typer.Context,
    stream: str,
    offset: Annotated[
        str, typer.Option(help="Read after this offset (-1: the start, now: the tail).")
    ] = "-1",
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following.")] = False,
    live: Annotated[str, typer.Option(help="How to follow: long-poll or sse.")] = "long-poll",
    max_items: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Stop once this many entries "
            "were printed (whole chunks, so the offset "
            "resumes exactly).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print a stream's entries (JSON lines for a JSON stream, raw bytes otherwise); the
    offset to resume from goes to stderr."""
    st = _state(ctx)
    if live not in ("long-poll", "sse"):
        st.fail("--live must be long-poll or sse", 2)
    with handled(st):
        ds = st.client().streams
        next_offset = offset
        printed = 0
        try:
            if follow:
                chunks: Iterator[Any] = ds.follow(
                    stream, offset, live="sse" if live == "sse" else "long-poll"
                )
            else:
                chunks = _catch_up(ds, stream, offset)
            for chunk in chunks:
                if chunk.items is not None:
                    for item in chunk.items:
                        if st.json_mode:
                            st.line(item)
                        else:
                            st.out.print_json(json.dumps(item), indent=None)
                    printed += len(chunk.items)
                else:
                    sys.stdout.flush()
                    sys.stdout.buffer.write(chunk.data)
                    sys.stdout.buffer.flush()
                next_offset = chunk.next_offset
                if max_items is not None and printed >= max_items:
                    break
        except KeyboardInterrupt:
            pass
        st.note(f"next offset: {next_offset}", {"next_offset": next_offset})


def _catch_up(ds: Any, stream: str, offset: str) -> Iterator[Any]:
    while True:
        chunk = ds.read(stream, offset)
        if chunk.data:
            yield chunk
        if chunk.up_to_date or chunk.next_offset == offset:
            if not chunk.data:
                yield chunk  # carries the final offset
            return
        offset = chunk.next_offset


@ds_app.command("search")
def ds_search(
    ctx: typer.Context,
    stream: str,
    query: str,
    size: Annotated[
        int | None, typer.Option(min=1, help="Hits per page.", show_default=False)
    ] = None,
    sort: Annotated[
        list[str] | None, typer.Option(help="Sort field (repeatable).", show_default=False)
    ] = None,
) -> None:
    """Search a JSON stream (POST /v1/stream/STREAM/_search)."""
    st = _state(ctx)
    with handled(st):
        r = st.client().streams.search(stream, query, size=size, sort=sort or None)
        if st.json_mode:
            for hit in r.hits:
                st.line({"offset": hit.offset, "score": hit.score, "source": hit.source})
        else:
            table = Table("offset", "score", "entry")
            for hit in r.hits:
                table.add_row(
                    hit.offset,
                    "" if hit.score is None else f"{hit.score:.3f}",
                    escape(json.dumps(hit.source, ensure_ascii=False)),
                )
            st.out.print(table)
        rel = "" if r.total_relation == "eq" else "≥ "
        st.note(
            f"{rel}{r.total} match(es)" + (" (timed out)" if r.timed_out else ""),
            {
                "total": r.total,
                "relation": r.total_relation,
                "timed_out": r.timed_out,
                "next_search_after": r.next_search_after,
            },
        )


def main() -> None:
    try:
        app()
    except HeadwaterError as exc:  # not reached through commands (they handle it); a guard
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_API_ERROR)
