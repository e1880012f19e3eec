"""template.yaml declares the Glue jobs the way glue_jobs/ expects: Glue 5.0 (Spark 3.5,
Python 3), the local script uploaded by `sam package`, the data bucket as --bucket, a scheduled
trigger each, the rollup job's role scoped to segments/ (read) and rollups/ (write), the index
job's to segments/ and registries/ (read), companions (write) and catalogue items. The dev pin
of pyspark matches Glue 5.0's Spark."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]


JOBS = {"RollupJob": "glue_jobs/rollup_job.py", "IndexJob": "glue_jobs/index_job.py"}


def _only(
    template: dict[str, Any], kind: str, job: str = "RollupJob"
) -> tuple[str, dict[str, Any]]:
    """The resource of `kind` that is, or targets, Glue job `job`."""
    found = []
    for k, v in template["Resources"].items():
        if v["Type"] != kind:
            continue
        props = v["Properties"]
        if k == job or props.get("Actions") == [{"JobName": {"Ref": job}}]:
            found.append((k, props))
    [(name, props)] = found
    return name, props


def test_the_glue_jobs_are_exactly_these(template: dict[str, Any]) -> None:
    jobs = {k for k, v in template["Resources"].items() if v["Type"] == "AWS::Glue::Job"}
    assert jobs == set(JOBS)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_each_job_is_glue_5_python_3_with_its_script_and_schedule(
    template: dict[str, Any], name: str
) -> None:
    _, job = _only(template, "AWS::Glue::Job", name)
    assert job["GlueVersion"] == "5.0"
    assert job["Command"]["ScriptLocation"] == JOBS[name]
    assert (REPO / JOBS[name]).is_file()
    assert job["DefaultArguments"]["--bucket"] == {"Ref": "DataBucket"}
    assert job["DefaultArguments"]["--resource-prefix"] == {"Fn::Sub": "${AWS::StackName}"}
    assert job["ExecutionProperty"]["MaxConcurrentRuns"] == 1
    _, trigger = _only(template, "AWS::Glue::Trigger", name)
    assert trigger["Type"] == "SCHEDULED"
    # the schedule is a parameter (tests/infra/test_deployable_stack.py) with a cron default
    schedule = template["Parameters"][trigger["Schedule"]["Ref"]]
    assert schedule["Default"].startswith("cron(")


def test_index_job_role_reads_segments_and_registries_and_writes_only_companions(
    template: dict[str, Any],
) -> None:
    _, job = _only(template, "AWS::Glue::Job", "IndexJob")
    # the index code imports jsonschema (durable.schema, for rollups): Glue must install it
    modules = job["DefaultArguments"]["--additional-python-modules"].split(",")
    pins = (REPO / "requirements.txt").read_text()
    assert {m.split("==")[0] for m in modules} == {"orjson", "jsonschema"}
    assert all(m in pins for m in modules), modules
    role = template["Resources"][job["Role"]["Fn::GetAtt"][0]]["Properties"]
    [policy] = role["Policies"]
    statements = policy["PolicyDocument"]["Statement"]
    puts = [s for s in statements if "s3:PutObject" in _list(s["Action"])]
    assert [s["Resource"] for s in puts] == [{"Fn::Sub": "${DataBucket.Arn}/segments/*.cix"}]
    reads = [
        r for s in statements if "s3:GetObject" in _list(s["Action"]) for r in _list(s["Resource"])
    ]
    assert {"Fn::Sub": "${DataBucket.Arn}/segments/*"} in reads
    assert {"Fn::Sub": "${DataBucket.Arn}/registries/*"} in reads
    assert not any("s3:DeleteObject" in _list(s["Action"]) for s in statements)
    writes = [s for s in statements if "dynamodb:PutItem" in _list(s["Action"])]
    assert len(writes) == 1
    assert writes[0]["Resource"] == {"Fn::GetAtt": ["IndexTable", "Arn"]}
    leading = writes[0]["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    assert leading == ["c#*"]  # catalogue items only


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
    assert template["Parameters"][trigger["Schedule"]["Ref"]]["Default"].startswith("cron(")
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
