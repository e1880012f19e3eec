"""template.yaml declares the rollup Glue job the way glue_jobs/ expects: Glue 5.0 (Spark 3.5,
Python 3), the local script uploaded by `sam package`, the data bucket as --bucket, a scheduled
trigger, and a role scoped to segments/ (read) and rollups/ (write). The dev pin of pyspark
matches Glue 5.0's Spark."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]


def _only(template: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    [(name, res)] = [(k, v) for k, v in template["Resources"].items() if v["Type"] == kind]
    return name, res["Properties"]


def test_glue_job_is_glue_5_python_3_reading_the_data_bucket(template: dict[str, Any]) -> None:
    _, job = _only(template, "AWS::Glue::Job")
    assert job["GlueVersion"] == "5.0"
    assert job["Command"]["Name"] == "glueetl" and job["Command"]["PythonVersion"] == "3"
    script = job["Command"]["ScriptLocation"]
    assert (REPO / script).is_file(), script  # a local path: `sam package` uploads it
    assert job["WorkerType"] == "G.1X" and job["NumberOfWorkers"] == 2
    args = job["DefaultArguments"]
    assert args["--bucket"] == {"Ref": "DataBucket"}
    # The catalogue (heads and segment items) lives in the stack's tables.
    assert args["--resource-prefix"] == {"Fn::Sub": "${AWS::StackName}"}
    assert args["--segments-prefix"] == "segments/" and args["--output-prefix"] == "rollups/v1/"
    assert "--extra-py-files" in args
    assert job["ExecutionProperty"]["MaxConcurrentRuns"] == 1


def test_trigger_is_scheduled_and_targets_the_job(template: dict[str, Any]) -> None:
    job_name, _ = _only(template, "AWS::Glue::Job")
    _, trigger = _only(template, "AWS::Glue::Trigger")
    assert trigger["Type"] == "SCHEDULED"
    assert trigger["Schedule"].startswith("cron(")
    assert trigger["StartOnCreation"] is True
    assert trigger["Actions"] == [{"JobName": {"Ref": job_name}}]


def test_job_role_reads_segments_and_writes_only_rollups(template: dict[str, Any]) -> None:
    _, job = _only(template, "AWS::Glue::Job")
    role_name = job["Role"]["Fn::GetAtt"][0]
    role = template["Resources"][role_name]["Properties"]
    [policy] = role["Policies"]
    statements = policy["PolicyDocument"]["Statement"]
    puts = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert [s["Resource"] for s in puts] == [{"Fn::Sub": "${DataBucket.Arn}/rollups/*"}]
    reads = [r for s in statements if "s3:GetObject" in s["Action"] for r in _list(s["Resource"])]
    assert {"Fn::Sub": "${DataBucket.Arn}/segments/*"} in reads
    assert {"Fn::Sub": "${DataBucket.Arn}/rollups/*"} in reads  # the previous run (incremental)
    assert not any("s3:DeleteObject" in s["Action"] for s in statements)
    # DynamoDB: reads of the heads (with the live-topic index) and index tables, no writes.
    ddb = [s for s in statements if any(a.startswith("dynamodb:") for a in s["Action"])]
    assert {a for s in ddb for a in s["Action"]} == {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
    }
    assert [r for s in ddb for r in _list(s["Resource"])] == [
        {"Fn::GetAtt": ["HeadsTable", "Arn"]},
        {"Fn::Sub": "${HeadsTable.Arn}/index/*"},
        {"Fn::GetAtt": ["IndexTable", "Arn"]},
    ]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_dev_requirements_pin_the_spark_of_glue_5() -> None:
    text = (REPO / "requirements-dev.txt").read_text()
    pins = re.findall(r"^pyspark==(\S+)$", text, re.MULTILINE)
    assert len(pins) == 1 and pins[0].startswith("3.5."), pins
