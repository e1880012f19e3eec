"""template.yaml makes the stack operable (docs/operations.md): every function logs JSON to its
own log group with the LogRetentionDays retention; every function has an Errors and a
Throttles alarm, every table a throttling alarm, the forwarder's dead-letter queue and the
sealer's per-topic failures an alarm each; a rule reports every Glue job's failed runs; all
of them notify the alarm topic. And the handlers' lines, the core's loggers' included, are
JSON carrying the invocation's correlation id."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws
from test_handlers import FakeLambdaContext

from headwater.engine import tiering
from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "tests" / "events"
KEYS_PARAMETER = "/headwater/test/api-keys"
TOPIC = {"Fn::If": ["CreateAlarmTopic", {"Ref": "AlarmTopic"}, {"Ref": "AlarmTopicArn"}]}


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in _resources(template, "AWS::CloudWatch::Alarm").items()}


def _dimensions(metric: dict[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}


# ------------------------------------------------------------------------------ logs
def test_every_function_logs_json_to_its_own_group_with_the_retention_parameter(
    template: dict[str, Any],
) -> None:
    functions = _resources(template, "AWS::Serverless::Function")
    assert len(functions) >= 5
    groups = set()
    for name, fn in functions.items():
        config = fn["Properties"]["LoggingConfig"]
        assert config["LogFormat"] == "JSON", name
        group_id = config["LogGroup"]["Ref"]
        group = template["Resources"][group_id]
        assert group["Type"] == "AWS::Logs::LogGroup", name
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        # named after the stack (no dependency cycle with the function), one per function
        assert group["Properties"]["LogGroupName"] == {
            "Fn::Sub": f"/aws/lambda/${{AWS::StackName}}/{name}"
        }
        assert group["DeletionPolicy"] == "Delete" and group["UpdateReplacePolicy"] == "Retain"
        groups.add(group_id)
    assert len(groups) == len(functions)


def test_log_retention_takes_exactly_what_cloudwatch_logs_accepts(
    template: dict[str, Any],
) -> None:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::Logs::LogGroup")
    accepted = schema.schema["properties"]["RetentionInDays"]["enum"]
    param = template["Parameters"]["LogRetentionDays"]
    assert sorted(param["AllowedValues"]) == sorted(accepted)
    assert param["Default"] == 30


def test_the_stream_function_logs_json_through_uvicorns_log_config(
    template: dict[str, Any],
) -> None:
    # StreamFunction runs no Lambda handler: uvicorn reads its logging configuration from
    # UVICORN_LOG_CONFIG, a file of the function's own code (/var/task = CodeUri).
    fn = template["Resources"]["StreamFunction"]["Properties"]
    path = fn["Environment"]["Variables"]["UVICORN_LOG_CONFIG"]
    assert path.startswith("/var/task/")
    assert (REPO / fn["CodeUri"] / path.removeprefix("/var/task/")).is_file()


# ------------------------------------------------------------------------------ alarms
def test_alarms_notify_a_topic_of_the_stack_unless_one_is_given(template: dict[str, Any]) -> None:
    assert template["Conditions"]["CreateAlarmTopic"] == {
        "Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]
    }
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""
    for name in ("AlarmTopic", "AlarmTopicPolicy"):
        assert template["Resources"][name]["Condition"] == "CreateAlarmTopic"
    assert template["Outputs"]["AlarmTopicArn"]["Value"] == TOPIC


def test_every_alarm_notifies_the_topic_and_ignores_missing_data(
    template: dict[str, Any],
) -> None:
    alarms = _alarms(template)
    assert alarms
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [TOPIC], name
        assert "OKActions" not in alarm and "InsufficientDataActions" not in alarm, name
        assert alarm["TreatMissingData"] == "notBreaching", name
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold", name
        assert str(alarm["AlarmDescription"]).endswith("See docs/operations.md."), name


def _metric_alarm(template: dict[str, Any], namespace: str, metric: str, **dims: Any) -> str:
    found = [
        name
        for name, a in _alarms(template).items()
        if a.get("Namespace") == namespace
        and a.get("MetricName") == metric
        and _dimensions(a) == dims
    ]
    assert len(found) == 1, (namespace, metric, dims, found)
    return found[0]


def test_every_function_has_an_errors_and_a_throttles_alarm(template: dict[str, Any]) -> None:
    for fn in _resources(template, "AWS::Serverless::Function"):
        errors = _alarms(template)[
            _metric_alarm(template, "AWS/Lambda", "Errors", FunctionName={"Ref": fn})
        ]
        assert errors["Statistic"] == "Sum" and errors["Period"] == 300
        assert errors["Threshold"] == {"Ref": "FunctionErrorsAlarmThreshold"}
        throttles = _alarms(template)[
            _metric_alarm(template, "AWS/Lambda", "Throttles", FunctionName={"Ref": fn})
        ]
        assert throttles["Statistic"] == "Sum" and throttles["Threshold"] == 0


def test_the_forwarders_dead_letter_queue_has_an_alarm(template: dict[str, Any]) -> None:
    [mapping] = _resources(template, "AWS::Lambda::EventSourceMapping").values()
    dlq = mapping["Properties"]["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]
    name = _metric_alarm(
        template,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        QueueName={"Fn::GetAtt": [dlq, "QueueName"]},
    )
    assert _alarms(template)[name]["Threshold"] == 0


def test_the_stream_consumers_lag_has_an_alarm(template: dict[str, Any]) -> None:
    [mapping] = _resources(template, "AWS::Lambda::EventSourceMapping").values()
    consumer = mapping["Properties"]["FunctionName"]
    name = _metric_alarm(template, "AWS/Lambda", "IteratorAge", FunctionName=consumer)
    alarm = _alarms(template)[name]
    assert alarm["Statistic"] == "Maximum" and alarm["EvaluationPeriods"] == 3
    assert alarm["Threshold"] == {"Fn::Sub": "${ForwarderLagAlarmSeconds}000"}  # ms


def test_every_table_and_index_has_a_throttling_alarm(template: dict[str, Any]) -> None:
    for table, resource in _resources(template, "AWS::DynamoDB::Table").items():
        indexes = [g["IndexName"] for g in resource["Properties"].get("GlobalSecondaryIndexes", [])]
        wanted = {
            (metric, index)
            for metric in ("ReadThrottleEvents", "WriteThrottleEvents")
            for index in [None, *indexes]
        }
        matching = []
        for name, alarm in _alarms(template).items():
            series = {}
            for m in alarm.get("Metrics", []):
                if "MetricStat" not in m:
                    continue
                stat = m["MetricStat"]
                dims = _dimensions(stat["Metric"])
                if stat["Metric"]["Namespace"] == "AWS/DynamoDB" and dims.get("TableName") == {
                    "Ref": table
                }:
                    assert stat["Stat"] == "Sum" and m["ReturnData"] is False, name
                    series[(stat["Metric"]["MetricName"], dims.get("GlobalSecondaryIndexName"))] = m
            if series:
                matching.append((name, alarm, series))
        [(name, alarm, series)] = matching
        assert set(series) == wanted, name
        [returned] = [m for m in alarm["Metrics"] if m.get("ReturnData") is True]
        assert returned["Expression"] == "SUM(METRICS())", name
        assert alarm["Threshold"] == 0, name


def test_a_rule_reports_failed_runs_of_every_glue_job(template: dict[str, Any]) -> None:
    jobs = [{"Ref": job} for job in _resources(template, "AWS::Glue::Job")]
    rules = {
        name: r["Properties"]
        for name, r in _resources(template, "AWS::Events::Rule").items()
        if r["Properties"].get("EventPattern", {}).get("source") == ["aws.glue"]
    }
    [(rule_name, rule)] = rules.items()
    pattern = rule["EventPattern"]
    assert pattern["detail-type"] == ["Glue Job State Change"]
    assert sorted(map(str, pattern["detail"]["jobName"])) == sorted(map(str, jobs))
    assert set(pattern["detail"]["state"]) == {"FAILED", "TIMEOUT", "ERROR"}
    assert rule["State"] == "ENABLED"
    [target] = rule["Targets"]
    assert target["Arn"] == TOPIC
    # the topic the stack creates lets exactly this rule publish (and this account's alarms)
    policy = template["Resources"]["AlarmTopicPolicy"]["Properties"]
    assert policy["Topics"] == [{"Ref": "AlarmTopic"}]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    events = statements["GlueJobFailures"]
    assert events["Principal"] == {"Service": "events.amazonaws.com"}
    assert events["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": [rule_name, "Arn"]}
    assert statements["CloudWatchAlarms"]["Principal"] == {"Service": "cloudwatch.amazonaws.com"}


def _filter_terms(pattern: str) -> dict[str, set[str]]:
    """`$.key = "value"` terms of a JSON metric filter pattern (the alternatives of a key)."""
    terms: dict[str, set[str]] = {}
    for key, value in re.findall(r'\$\.(\w+)\s*=\s*"([^"]*)"', pattern):
        terms.setdefault(key, set()).add(value)
    return terms


def test_the_sealers_topic_failures_have_a_metric_filter_and_an_alarm(
    template: dict[str, Any],
) -> None:
    [(_, mf)] = _resources(template, "AWS::Logs::MetricFilter").items()
    props = mf["Properties"]
    assert props["LogGroupName"] == {"Ref": "SealerFunctionLogGroup"}
    assert _filter_terms(props["FilterPattern"]) == {
        "name": {tiering.log.name},  # the logger of the sweep's "upkeep of %s failed"
        "level": {"WARNING", "ERROR"},
    }
    [transform] = props["MetricTransformations"]
    dims = {d["Key"]: d["Value"] for d in transform["Dimensions"]}
    assert dims == {"function_name": "$.function_name"}
    name = _metric_alarm(
        template,
        transform["MetricNamespace"],
        transform["MetricName"],
        function_name={"Ref": "SealerFunction"},
    )
    alarm = _alarms(template)[name]
    assert alarm["Statistic"] == "Sum" and alarm["Threshold"] == 0
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == 3


# ------------------------------------------------------------------------------ JSON lines
def _json_lines(out: str) -> list[dict[str, Any]]:
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # every line, not only the logs, is JSON


def _logs(out: str) -> dict[str, dict[str, Any]]:
    """The log lines by message (the rest are the Metrics' EMF blobs)."""
    return {line["message"]: line for line in _json_lines(out) if "message" in line}


@pytest.fixture
def load_handler(
    fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], ModuleType]]:
    """Imports functions/<name>/handler.py the way Lambda does, against in-process moto. Call
    it in the test itself: Powertools binds its handler to the sys.stdout of that moment,
    and capsys swaps sys.stdout between a fixture's setup and the test."""
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "hw-obs")
    monkeypatch.setenv("HEADWATER_BUCKET", "hw-obs-data")
    monkeypatch.setenv("HEADWATER_API_KEYS_PARAMETER", KEYS_PARAMETER)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "HeadwaterTest")
    monkeypatch.setenv("HEADWATER_TIERING_INLINE", "0")  # in-process moto: one thread
    monkeypatch.setenv("HEADWATER_SEAL_RECORDS", "10")
    loaded: list[ModuleType] = []

    def load(name: str) -> ModuleType:
        # A service of its own: a fresh Powertools handler on this test's stdout.
        monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", f"headwater-obs-{name}")
        path = REPO / "functions" / name / "handler.py"
        spec = importlib.util.spec_from_file_location(f"headwater_{name}_obs_under_test", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        loaded.append(module)
        return module

    parameters.clear_caches()
    with mock_aws():
        settings = Settings.from_env()
        ensure_resources(settings, AwsClients.create(settings))
        boto3.client("ssm").put_parameter(
            Name=KEYS_PARAMETER, Value="k", Type="SecureString", Overwrite=True
        )
        yield load
        for module in loaded:
            if hasattr(module, "asgi"):  # Mangum's handler installed a loop at import
                asyncio.get_event_loop().close()
                asyncio.set_event_loop(None)
            if module.__dict__.get("_core") is not None:
                module._core.engine.close()
    parameters.clear_caches()


def test_api_lines_are_json_with_the_function_url_request_id(
    load_handler: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN ApiFunction's handler, and a core module that logs while a request is served
    api = load_handler("api")
    asgi = api.asgi

    def serve(event: dict[str, Any], context: Any) -> Any:
        logging.getLogger("headwater.http.app").warning("core line")
        return asgi(event, context)

    api.asgi = serve
    event = json.loads((EVENTS / "01_health_get.json").read_text())
    capsys.readouterr()
    # WHEN Lambda invokes it with a recorded function-URL event
    assert api.handler(event, FakeLambdaContext())["statusCode"] == 200
    # THEN stdout holds JSON lines, the handler's and the core's, with the URL's request id
    logs = _logs(capsys.readouterr().out)
    own, core = logs["request"], logs["core line"]
    request_id = event["requestContext"]["requestId"]
    assert own["correlation_id"] == core["correlation_id"] == request_id
    invocation = FakeLambdaContext.aws_request_id
    assert own["function_request_id"] == core["function_request_id"] == invocation
    assert own["service"] == core["service"] == "headwater-obs-api"
    assert (own["level"], own["status"], own["path"]) == ("INFO", 200, "/v0/health")
    assert (core["level"], core["name"]) == ("WARNING", "headwater.http.app")


def test_a_failed_topic_upkeep_is_a_json_line_the_metric_filter_counts(
    load_handler: Callable[[str], ModuleType],
    template: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a topic past the seal threshold, and storage failing its upkeep
    sealer = load_handler("sealer")
    core = sealer._built()
    records = [NewRecord({"i": i}, size=24) for i in range(12)]
    asyncio.run(core.engine.append("busy", AppendRequest(records)))

    def failing(topic: str, head: object = None) -> object:
        raise StorageUnavailable("throttled")

    monkeypatch.setattr(core.upkeep, "run", failing)
    event = json.loads((EVENTS / "40_sealer_schedule.json").read_text())
    capsys.readouterr()
    # WHEN the schedule invokes the sealer
    assert sealer.handler(event, FakeLambdaContext())["topics"] == 0
    # THEN the sweep's warning is a JSON line of the invocation (the EventBridge event id)
    warning = _logs(capsys.readouterr().out)["upkeep of busy failed"]
    assert warning["name"] == tiering.log.name
    assert warning["correlation_id"] == event["id"]
    assert warning["function_name"] == FakeLambdaContext.function_name
    assert warning["exception_name"] == "StorageUnavailable"
    # AND it is a line the template's metric filter counts
    [mf] = _resources(template, "AWS::Logs::MetricFilter").values()
    for key, values in _filter_terms(mf["Properties"]["FilterPattern"]).items():
        assert warning[key] in values, key


def test_the_stream_functions_uvicorn_logs_json(
    template: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn
    from uvicorn.main import main as uvicorn_cli

    # GIVEN the environment template.yaml gives StreamFunction, its task root here
    fn = template["Resources"]["StreamFunction"]["Properties"]
    config_file = REPO / fn["CodeUri"] / "logging.json"
    monkeypatch.setenv("UVICORN_LOG_CONFIG", str(config_file))
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "headwater-obs-stream")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "headwater-test-StreamFunction")
    # WHEN run.sh's command line is parsed THEN uvicorn takes the file from the environment
    run_sh = (REPO / "functions" / "stream" / "run.sh").read_text()
    command = run_sh.split("exec python -m uvicorn", 1)[1].replace("\\\n", " ")
    argv = [arg.replace("${AWS_LWA_PORT:-${PORT:-8080}}", "8080") for arg in shlex.split(command)]
    ctx = uvicorn_cli.make_context("uvicorn", argv)
    assert ctx.params["log_config"] == str(config_file)
    root = logging.getLogger()
    logging.getLogger("uvicorn")  # registered, so it is restored below
    saved = {n: (list(lg.handlers), lg.propagate, lg.level) for n, lg in _loggers("uvicorn")}
    root_handlers = list(root.handlers)
    try:
        # AND the server's logging configured from it writes JSON lines
        uvicorn.Config(
            app="headwater.http.app:create_app",
            factory=True,
            log_config=ctx.params["log_config"],
            log_level=ctx.params["log_level"],
        )
        capsys.readouterr()
        logging.getLogger("headwater.http.sse").warning("slow consumer %s", "c1")
        logging.getLogger("uvicorn.error").error("server trouble")
        lines = {line["message"]: line for line in _json_lines(capsys.readouterr().out)}
    finally:
        for n, (handlers, propagate, level) in saved.items():
            lg = logging.getLogger(n)
            lg.handlers[:] = handlers
            lg.propagate = propagate
            lg.setLevel(level)
        root.handlers[:] = root_handlers
    core = lines["slow consumer c1"]
    assert (core["name"], core["level"]) == ("headwater.http.sse", "WARNING")
    assert core["service"] == "headwater-obs-stream"
    assert core["function_name"] == "headwater-test-StreamFunction"
    assert lines["server trouble"]["name"] == "uvicorn.error"


def _loggers(prefix: str) -> list[tuple[str, logging.Logger]]:
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] == prefix]
    return [(n, logging.getLogger(n)) for n in names]
