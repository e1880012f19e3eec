"""storage/ddb.py's retry-safe writes against a fake DynamoDB client whose answers can be
lost after the write applied: a repeat finds its own commit id (success, not a conflict),
someone else's write is still a conflict, a counter step never applies twice, and a write
storage never confirms ends in OutcomeUnknown rather than a guess."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from headwater.errors import OutcomeUnknown, StorageUnavailable
from headwater.storage import ddb

pytestmark = pytest.mark.unit


def _client_error(code: str, **extra: Any) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, **extra}, "op")


class FakeTable:
    """One item, conditions as Python predicates; `lose` answers of calls are dropped after
    they applied (ConnectionClosedError, what botocore raises for a reset connection)."""

    def __init__(self, item: dict[str, Any] | None = None, lose: int = 0) -> None:
        self.item = item
        self.lose = lose
        self.calls = 0
        self.tokens: dict[str, Any] = {}

    def _lost(self) -> None:
        if self.lose > 0:
            self.lose -= 1
            raise ConnectionClosedError(endpoint_url="http://fake")

    def update_item(self, **kw: Any) -> dict[str, Any]:
        """Supports `SET hc = :hc__, n = n + :a` shaped updates and conditions on n / hc."""
        self.calls += 1
        item = dict(self.item or {})
        values = kw.get("ExpressionAttributeValues", {})
        cond = kw.get("ConditionExpression", "")
        ok = True
        if "hc <> :hc__" in cond and item.get("hc") == values.get(":hc__"):
            ok = False
        if "n <= :lim" in cond and int(item.get("n", {"N": "0"})["N"]) > int(values[":lim"]["N"]):
            ok = False
        if not ok:
            raise _client_error("ConditionalCheckFailedException", Item=self.item)
        n = int(item.get("n", {"N": "0"})["N"]) + int(values[":a"]["N"])
        item["n"] = {"N": str(n)}
        if ":hc__" in values:
            item["hc"] = values[":hc__"]
        self.item = item
        self._lost()
        return {"Attributes": item}

    def transact_write_items(self, **kw: Any) -> dict[str, Any]:
        self.calls += 1
        token = kw["ClientRequestToken"]
        if token in self.tokens:  # what DynamoDB does for 10 minutes: success, no change
            self._lost()
            return {}
        self.tokens[token] = kw["TransactItems"]
        self._lost()
        return {}


def test_a_counter_step_whose_answer_was_lost_applies_once() -> None:
    # GIVEN a counter whose first increment applies but its answer is lost
    table = FakeTable({"n": {"N": "1"}}, lose=1)
    # WHEN the retry-safe write re-sends it
    assert ddb.conditional(
        table.update_item,
        once=True,
        TableName="t",
        Key={"pk": {"S": "q"}},
        UpdateExpression="SET n = n + :a",
        ConditionExpression="attribute_not_exists(n) OR n <= :lim",
        ExpressionAttributeValues={":a": {"N": "1"}, ":lim": {"N": "10"}},
    )
    # THEN it counted once, and the repeat was recognised as ours
    assert table.item is not None and table.item["n"] == {"N": "2"}
    assert table.calls == 2


def test_another_writers_change_is_still_a_conflict() -> None:
    table = FakeTable({"n": {"N": "11"}, "hc": {"S": "someone-else"}})
    assert not ddb.conditional(
        table.update_item,
        TableName="t",
        Key={"pk": {"S": "q"}},
        UpdateExpression="SET n = n + :a",
        ConditionExpression="n <= :lim",
        ExpressionAttributeValues={":a": {"N": "1"}, ":lim": {"N": "10"}},
    )


def test_a_transaction_is_re_sent_with_its_token_until_answered() -> None:
    table = FakeTable(lose=3)
    out = ddb.transact(table, [{"Put": {"TableName": "t", "Item": {}}}], "tok")
    assert out.committed and out.retried
    assert table.calls == 4  # one apply, then re-sends answered from the token
    assert len(table.tokens) == 1


def test_a_cancelled_repeat_finds_its_own_commit_id() -> None:
    reasons = [{"Code": "ConditionalCheckFailed", "Item": {"hc": {"S": "abc"}}}, {"Code": "None"}]
    assert ddb.any_mine(reasons, "abc")
    assert not ddb.any_mine(reasons, "xyz")
    assert ddb.failed_positions(reasons) == {0}


def test_a_write_storage_never_confirms_is_reported_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ddb, "RESOLVE_BUDGET_S", 0.2)

    def never(**_: Any) -> None:
        raise ConnectionClosedError(endpoint_url="http://fake")

    with pytest.raises(OutcomeUnknown) as info:
        ddb.transact(type("C", (), {"transact_write_items": staticmethod(never)})(), [], "t")
    assert info.value.status == 503 and info.value.detail == {"outcome": "unknown"}
    with pytest.raises(OutcomeUnknown):
        ddb.write_once(never, TableName="t", Item={"pk": {"S": "x"}})


def test_an_invalid_request_is_a_definite_error_not_a_resend() -> None:
    calls = []

    def invalid(**kw: Any) -> None:
        calls.append(kw)
        raise _client_error("ValidationException")

    with pytest.raises(StorageUnavailable) as info:
        ddb.write_once(invalid, TableName="t", Item={})
    assert not isinstance(info.value, OutcomeUnknown)
    assert len(calls) == 1


def test_with_cid_writes_the_commit_id_and_asks_for_the_old_item() -> None:
    put = ddb.with_cid({"Item": {"pk": {"S": "a"}}, "ConditionExpression": "x"}, "c1")
    assert put["Item"]["hc"] == {"S": "c1"}
    assert put["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    upd = ddb.with_cid({"UpdateExpression": "ADD n :a REMOVE x", "ConditionExpression": "y"}, "c1")
    assert upd["UpdateExpression"].startswith("SET hc = :hc__")
    assert upd["ExpressionAttributeValues"][":hc__"] == {"S": "c1"}
    once = ddb.with_cid({"UpdateExpression": "SET n = :v"}, "c1", once=True)
    assert once["UpdateExpression"] == "SET hc = :hc__, n = :v"
    assert "hc <> :hc__" in once["ConditionExpression"]


def test_a_delete_found_gone_after_a_resend_is_ours() -> None:
    state = {"item": {"pk": {"S": "a"}}, "lose": 1}

    def delete_item(**_: Any) -> dict[str, Any]:
        old, state["item"] = state["item"], None
        if state["lose"]:
            state["lose"] = 0
            raise ConnectionClosedError(endpoint_url="http://fake")
        return {"Attributes": old} if old else {}

    assert ddb.delete_once(delete_item, TableName="t", Key={}) == {}
    assert ddb.delete_once(delete_item, TableName="t", Key={}) is None  # really absent
