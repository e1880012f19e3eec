"""DynamoDB adapter for a stream's index catalogue: one item per stream incarnation in the
index table, `pk` = `c#<topic>#<epoch>`, `sk` = `catalogue`. It says which index plan
(`generation`, a fingerprint of the search config the companions were built for) covers
which contiguous prefix of the stream's sealed segments (`covered_through`: the last seq of
the last covered segment). Companion objects live in S3 at keys derived from the segment and
the generation (headwater.index.build.companion_key), so the catalogue needs no item per
segment. `runs` lists the routing-key lexicon runs (index/runs.py) compacted over
consecutive covered segments, as (first seq, last seq, name of the run's last segment object)
in seq order: the run's object sits next to that segment.

Coverage is published by one conditional write: it moves from exactly what the builder read
to the new prefix, so two builders running at once (the Glue job twice, or the job and a
process's upkeep) cannot publish over each other; the loser reads again. The write carries a
commit id (storage/ddb.py), so a publish whose answer was lost and whose retry then fails its
condition is recognised as applied, not reported as a lost race."""

from __future__ import annotations

from typing import Any

from headwater.engine.ports.catalogue import Catalogue
from headwater.settings import Settings
from headwater.storage.ddb import call as _call
from headwater.storage.ddb import conditional, delete_once
from headwater.storage.ddb import int_of as _i
from headwater.storage.ddb import num as _n
from headwater.storage.ddb import text as _s
from headwater.storage.schema import INDEX

CATALOGUE_SK = "catalogue"


def catalogue_pk(topic: str, epoch: int) -> str:
    return f"c#{topic}#{epoch}"


def _runs_text(runs: tuple[tuple[int, int, str], ...]) -> str:
    return ",".join(f"{a}-{b}-{name}" for a, b, name in runs)


def _runs_of(text: str) -> tuple[tuple[int, int, str], ...]:
    out: list[tuple[int, int, str]] = []
    for part in text.split(","):
        if part:
            a, b, name = part.split("-", 2)
            out.append((int(a), int(b), name))
    return tuple(out)


def _catalogue(item: dict[str, Any]) -> Catalogue:
    return Catalogue(
        generation=item["gen"]["S"],
        covered_through=_i(item, "cov"),
        segments=_i(item, "nseg"),
        bytes=_i(item, "byt"),
        updated_ms=_i(item, "upd"),
        runs=_runs_of(item["runs"]["S"]) if "runs" in item else (),
    )


class DynamoIndexCatalogue:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(INDEX.logical)

    def _key(self, topic: str, epoch: int) -> dict[str, Any]:
        return {"pk": _s(catalogue_pk(topic, epoch)), "sk": _s(CATALOGUE_SK)}

    def get(self, topic: str, epoch: int) -> Catalogue | None:
        resp = _call(
            self._ddb.get_item,
            TableName=self._table,
            Key=self._key(topic, epoch),
            ConsistentRead=True,
        )
        item = resp.get("Item")
        return _catalogue(item) if item else None

    def publish(self, topic: str, epoch: int, expected: Catalogue | None, new: Catalogue) -> bool:
        """Make `new` the catalogue iff it is still `expected` (None: there is none yet).
        False: another builder moved it first (read it again)."""
        item = {
            **self._key(topic, epoch),
            "gen": _s(new.generation),
            "cov": _n(new.covered_through),
            "nseg": _n(new.segments),
            "byt": _n(new.bytes),
            "upd": _n(new.updated_ms),
        }
        if new.runs:
            item["runs"] = _s(_runs_text(new.runs))
        if expected is None:
            return conditional(
                self._ddb.put_item,
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk)",
            )
        return conditional(
            self._ddb.put_item,
            TableName=self._table,
            Item=item,
            ConditionExpression="gen = :g AND cov = :c AND nseg = :n AND "
            + ("runs = :r" if expected.runs else "attribute_not_exists(runs)"),
            ExpressionAttributeValues={
                ":g": _s(expected.generation),
                ":c": _n(expected.covered_through),
                ":n": _n(expected.segments),
                **({":r": _s(_runs_text(expected.runs))} if expected.runs else {}),
            },
        )

    def delete(self, topic: str, epoch: int) -> None:
        """Forget a stream incarnation's catalogue (its companions are deleted by prefix)."""
        delete_once(self._ddb.delete_item, TableName=self._table, Key=self._key(topic, epoch))
