"""template.yaml wires ForwarderFunction to the log table's stream the way the handler
expects: partial batch failures, bisect, bounded retries into a dead-letter queue, only
INSERTs (new frames), and IAM scoped to the Headwater tables, stream, bucket and queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_forwarder_mapping_reads_the_log_stream_with_partial_failures(
    template: dict[str, Any],
) -> None:
    [mapping] = _resources(template, "AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert props["FunctionName"] == {"Ref": "ForwarderFunction"}
    assert props["EventSourceArn"] == {"Fn::GetAtt": ["LogTable", "StreamArn"]}
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    assert 0 < props["MaximumRetryAttempts"] <= 10
    assert 1 <= props["BatchSize"] <= 1000
    assert props["MaximumBatchingWindowInSeconds"] <= 5
    assert props["FilterCriteria"]["Filters"] == [{"Pattern": '{"eventName": ["INSERT"]}'}]
    dlq = props["DestinationConfig"]["OnFailure"]["Destination"]
    assert dlq == {"Fn::GetAtt": ["ForwarderDeadLetterQueue", "Arn"]}
    assert template["Resources"]["ForwarderDeadLetterQueue"]["Type"] == "AWS::SQS::Queue"


def test_forwarder_function_uses_the_layer_and_scoped_policies(template: dict[str, Any]) -> None:
    fn = template["Resources"]["ForwarderFunction"]["Properties"]
    assert fn["CodeUri"] == "functions/forwarder"
    assert fn["Handler"] == "handler.handler"
    assert fn["Layers"] == [{"Ref": "HeadwaterLayer"}]
    assert "Events" not in fn  # a SAM event would attach a managed policy on Resource "*"
    # the inline statements, and AWSXrayWriteOnlyAccess only with EnableTracing
    inline = [p for p in fn["Policies"] if "Statement" in p]
    others = [p for p in fn["Policies"] if "Statement" not in p]
    assert [p["Fn::If"][0] for p in others] == ["TracingOn"]
    statements = [s for p in inline for s in p["Statement"]]
    for statement in statements:
        resources = statement["Resource"]
        for resource in resources if isinstance(resources, list) else [resources]:
            assert resource != "*", statement
    tables = next(s for s in statements if s["Sid"] == "ForwardTableItems")["Resource"]
    names = {r["Fn::GetAtt"][0] if "Fn::GetAtt" in r else r["Fn::Sub"] for r in tables}
    # the tables, and the heads table's index (the live-topic listing)
    assert names == {"HeadsTable", "LogTable", "IndexTable", "${HeadsTable.Arn}/index/*"}


def test_forwarder_takes_its_dependencies_from_the_layer() -> None:
    text = (REPO / "functions" / "forwarder" / "requirements.txt").read_text()
    assert [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")] == []
