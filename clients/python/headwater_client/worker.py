"""A queue worker loop (spec §10): claim a job, run a handler, keep the lease alive while it
runs, ack on success and nack on failure.

    def handle(job: Job) -> None:
        resize(job.data["url"])          # raise to nack (the job comes back, or is
                                         # dead-lettered after the queue's max_deliveries)

    client.worker("jobs", handle, lease_ms=30_000).run()

While the handler runs, a background thread extends the lease every `lease_ms / 3` (so a
job may take far longer than one lease). If an extension finds the lease gone (it expired
and another worker re-claimed the job) the outcome is `lost`: the final ack or nack is
skipped by the server, which is what fencing with the job's `lease_id` guarantees."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from headwater_client.errors import HeadwaterError
from headwater_client.models import Job

if TYPE_CHECKING:
    from headwater_client.client import Client

__all__ = ["JobOutcome", "Worker", "WorkerStats"]

log = logging.getLogger(__name__)

Status = Literal["acked", "nacked", "lost"]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job: Job
    status: Status
    elapsed_s: float
    extensions: int = 0  # successful lease extensions while the handler ran
    error: BaseException | None = None  # what the handler raised (nacked)
    result: object = None  # what the handler returned (acked)


@dataclass(slots=True)
class WorkerStats:
    acked: int = 0
    nacked: int = 0
    lost: int = 0
    outcomes: list[JobOutcome] = field(default_factory=list)

    @property
    def processed(self) -> int:
        return self.acked + self.nacked + self.lost


class Worker:
    """Runs `handler(job)` for the jobs of `queue`, one at a time.

    lease_ms: each claim's lease (and each extension's); extend_every_s: how often the
    lease is extended while the handler runs (default lease_ms / 3); nack_delay_ms: how long
    a failed job waits before it is claimable again; poll_interval_s: the pause after a
    claim that found nothing; on_outcome: called after every job."""

    def __init__(
        self,
        client: Client,
        queue: str,
        handler: Callable[[Job], object],
        *,
        node: str | None = None,
        lease_ms: int = 30_000,
        extend_every_s: float | None = None,
        nack_delay_ms: int = 0,
        poll_interval_s: float = 0.5,
        on_outcome: Callable[[JobOutcome], None] | None = None,
    ) -> None:
        self.client = client
        self.queue = queue
        self.handler = handler
        self.node = node if node is not None else client.node
        self.lease_ms = lease_ms
        self.extend_every_s = (
            extend_every_s if extend_every_s is not None else max(lease_ms / 3000, 0.05)
        )
        self.nack_delay_ms = nack_delay_ms
        self.poll_interval_s = poll_interval_s
        self.on_outcome = on_outcome
        self._stop = threading.Event()

    def stop(self) -> None:
        """Finish the job in hand, then return from `run()`."""
        self._stop.set()

    def run(self, *, max_jobs: int | None = None, until_empty: bool = False) -> WorkerStats:
        """Process jobs until `stop()`, `max_jobs` jobs, or (with `until_empty`) the first
        claim that finds nothing ready."""
        stats = WorkerStats()
        while not self._stop.is_set():
            if max_jobs is not None and stats.processed >= max_jobs:
                break
            outcome = self.run_once()
            if outcome is None:
                if until_empty:
                    break
                self._stop.wait(self.poll_interval_s)
                continue
            stats.outcomes.append(outcome)
            if outcome.status == "acked":
                stats.acked += 1
            elif outcome.status == "nacked":
                stats.nacked += 1
            else:
                stats.lost += 1
        return stats

    def run_once(self) -> JobOutcome | None:
        """Claim one job and process it; None when no job was ready."""
        claimed = self.client.claim(self.queue, max_jobs=1, lease_ms=self.lease_ms, node=self.node)
        if not claimed.jobs:
            return None
        return self.process(claimed.jobs[0])

    def process(self, job: Job) -> JobOutcome:
        """Run the handler on a claimed job, extending its lease meanwhile; ack or nack."""
        keeper = _LeaseKeeper(self, job)
        keeper.start()
        started = time.monotonic()
        error: BaseException | None = None
        result: object = None
        try:
            result = self.handler(job)
        except KeyboardInterrupt:
            keeper.finish()
            self.client.nack_job(job, node=self.node)  # give it back at once, then stop
            raise
        except Exception as exc:
            error = exc
        finally:
            keeper.finish()
        elapsed = time.monotonic() - started
        if error is None:
            done = self.client.ack_job(job, node=self.node)
            status: Status = "acked" if done.done else "lost"
        else:
            log.info("job %s#%d failed: %r", job.topic, job.seq, error)
            done = self.client.nack_job(job, delay_ms=self.nack_delay_ms, node=self.node)
            status = "nacked" if done.done else "lost"
        outcome = JobOutcome(job, status, elapsed, keeper.extensions, error, result)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome


class _LeaseKeeper:
    """Extends one job's lease every `extend_every_s` until `finish()`."""

    def __init__(self, worker: Worker, job: Job) -> None:
        self.worker = worker
        self.job = job
        self.extensions = 0
        self.lost = False
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-{job.topic}-{job.seq}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        w, job = self.worker, self.job
        while not self._done.wait(w.extend_every_s):
            try:
                out = w.client.extend(
                    job.topic, [job.seq], w.lease_ms, lease_ids=[job.lease_id], node=w.node
                )
            except HeadwaterError as exc:  # a transient failure: try again next interval
                log.warning("extending job %s#%d failed: %s", job.topic, job.seq, exc)
                continue
            if out.skipped:
                self.lost = True  # expired and re-claimed elsewhere: nothing left to keep
                return
            self.extensions += 1
