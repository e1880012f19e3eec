"""template.yaml wires the /api/v2 dashboard (docs/dashboard.md) the way the app expects:
the configurations table is declared and granted to the HTTP functions with exactly the
item actions storage/dashboard_configs.py uses, both functions get the dashboard settings
from stack parameters, both function URLs' CORS admit the dashboard origin and its headers,
and the rollup job counts the same topic."""

from __future__ import annotations

import re
from typing import Any

import pytest

from headwater import settings as hw_settings
from headwater.storage.schema import DASHBOARD

pytestmark = pytest.mark.infra

APP_FUNCTIONS = ("ApiFunction", "StreamFunction")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _function(template: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(template["Resources"][name]["Properties"])


def _cors(template: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(_function(template, name)["FunctionUrlConfig"]["Cors"])


def test_dashboard_table_is_declared_retained_and_output(template: dict[str, Any]) -> None:
    # (test_schema_agrees proves the keys match schema.DASHBOARD)
    resource = template["Resources"][DASHBOARD.cfn_logical_id]
    assert DASHBOARD.cfn_logical_id == "DashboardTable"
    assert resource["DeletionPolicy"] == "Retain" and resource["UpdateReplacePolicy"] == "Retain"
    props = resource["Properties"]
    # user data that exists nowhere else: recoverable like the durable tables
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert template["Outputs"]["DashboardTableName"] == {"Value": {"Ref": "DashboardTable"}}


def test_http_functions_may_use_the_dashboard_table(template: dict[str, Any]) -> None:
    policy = "AppDataAccessPolicy"
    for name in APP_FUNCTIONS:
        assert {"Ref": policy} in _function(template, name)["Policies"], name
    statements = template["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"]
    granted = [
        s
        for s in statements
        if "Sid" in s and {"Fn::GetAtt": ["DashboardTable", "Arn"]} in _list(s["Resource"])
    ]
    assert [s["Sid"] for s in granted] == ["DashboardConfigurations"]
    [statement] = granted
    assert statement["Effect"] == "Allow"
    # get, get_many (BatchGetItem), list (Query), update; create/delete are
    # TransactWriteItems (Update + Put, Delete + Update), which IAM authorizes per item
    # action: there is no TransactWriteItems action.
    assert set(statement["Action"]) == {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    }
    assert statement["Resource"] == [{"Fn::GetAtt": ["DashboardTable", "Arn"]}]  # no index


def test_dashboard_parameters(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    assert params["DashboardTopic"]["Default"] == "sentiment"
    poll = params["DashboardPollMs"]
    assert (poll["Type"], poll["Default"], poll["MinValue"]) == ("Number", 5000, 100)
    assert "5 s" in poll["Description"]  # the contract's clarification
    cap = params["DashboardMaxConnections"]
    assert (cap["Type"], cap["Default"]) == ("Number", 100)
    origin = params["DashboardOrigin"]
    assert (origin["Type"], origin["Default"]) == ("String", "*")


@pytest.mark.parametrize("name", APP_FUNCTIONS)
def test_app_functions_get_the_dashboard_settings(template: dict[str, Any], name: str) -> None:
    env = _function(template, name)["Environment"]["Variables"]
    assert env[hw_settings.ENV_DASHBOARD_TOPIC] == {"Ref": "DashboardTopic"}
    assert env[hw_settings.ENV_DASHBOARD_POLL_MS] == {"Ref": "DashboardPollMs"}
    assert env[hw_settings.ENV_DASHBOARD_MAX_CONNECTIONS] == {"Ref": "DashboardMaxConnections"}


def test_rollup_job_counts_the_dashboard_topic(template: dict[str, Any]) -> None:
    job = template["Resources"]["RollupJob"]
    assert job["Type"] == "AWS::Glue::Job"
    args = job["Properties"]["DefaultArguments"]
    assert args["--sentiment-topics"] == {"Ref": "DashboardTopic"}


@pytest.mark.parametrize("name", APP_FUNCTIONS)
def test_cors_admits_the_dashboard(template: dict[str, Any], name: str) -> None:
    cors = _cors(template, name)
    assert cors["AllowOrigins"] == [
        {"Ref": "CorsAllowOrigin"},
        {"Fn::If": ["DashboardOriginIsExtra", {"Ref": "DashboardOrigin"}, {"Ref": "AWS::NoValue"}]},
    ]
    methods = set(cors["AllowMethods"])
    assert "*" in methods or {"GET", "POST", "PUT", "DELETE"} <= methods
    # X-User-ID (configurations), Last-Event-ID (resume), JSON bodies, the ingest key and
    # its Idempotency-Key; Retry-After of a 503 readable by the page
    headers = set(cors["AllowHeaders"])
    assert {
        "x-user-id",
        "last-event-id",
        "content-type",
        "authorization",
        "idempotency-key",
    } <= headers
    assert "retry-after" in cors["ExposeHeaders"]
    # Lambda: lower-case header names are what it compares; at most 100 of each
    for values in (cors["AllowHeaders"], cors["ExposeHeaders"]):
        assert len(values) == len(set(values)) <= 100
        assert all(v == v.lower() for v in values)


def _condition(template: dict[str, Any], expr: Any, params: dict[str, str]) -> bool:
    """Evaluate the few condition functions the template uses, for given parameters."""
    if isinstance(expr, dict) and len(expr) == 1:
        [(fn, args)] = expr.items()
        if fn == "Fn::Not":
            return not _condition(template, args[0], params)
        if fn == "Fn::Or":
            return any(_condition(template, a, params) for a in args)
        if fn == "Fn::And":
            return all(_condition(template, a, params) for a in args)
        if fn == "Fn::Equals":
            left, right = (_value(a, params) for a in args)
            return left == right
        if fn == "Condition":
            return _condition(template, template["Conditions"][args], params)
    raise AssertionError(f"unexpected condition {expr!r}")


def _value(expr: Any, params: dict[str, str]) -> Any:
    if isinstance(expr, dict) and "Ref" in expr:
        return params[expr["Ref"]]
    return expr


def _origins(template: dict[str, Any], name: str, params: dict[str, str]) -> list[str]:
    """AllowOrigins as CloudFormation resolves it for the given parameter values."""
    out: list[str] = []
    for item in _cors(template, name)["AllowOrigins"]:
        if isinstance(item, dict) and "Fn::If" in item:
            cond, yes, no = item["Fn::If"]
            item = yes if _condition(template, template["Conditions"][cond], params) else no
        if item == {"Ref": "AWS::NoValue"}:
            continue
        out.append(_value(item, params))
    return out


@pytest.mark.parametrize(
    ("cors_origin", "dashboard_origin", "expected"),
    [
        ("*", "*", ["*"]),  # the defaults: "*" once
        ("*", "https://dash.example.com", ["*"]),  # "*" admits it already
        ("https://app.example.com", "*", ["https://app.example.com", "*"]),
        (
            "https://app.example.com",
            "https://dash.example.com",
            ["https://app.example.com", "https://dash.example.com"],
        ),
        ("https://app.example.com", "https://app.example.com", ["https://app.example.com"]),
    ],
)
def test_cors_origins_resolve_to_a_valid_list(
    template: dict[str, Any], cors_origin: str, dashboard_origin: str, expected: list[str]
) -> None:
    params = {"CorsAllowOrigin": cors_origin, "DashboardOrigin": dashboard_origin}
    for name in APP_FUNCTIONS:
        origins = _origins(template, name, params)
        assert origins == expected, name
        # what Lambda accepts: 1-100 origins; never the same one twice
        assert 1 <= len(origins) <= 100 and len(origins) == len(set(origins))
        assert cors_origin in origins or "*" in origins
        assert dashboard_origin in origins or "*" in origins


def test_stream_url_output_mentions_the_dashboard_streams(template: dict[str, Any]) -> None:
    assert "/api/v2" in template["Outputs"]["StreamUrl"]["Description"]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("*", True),
        ("https://dash.example.com", True),
        ("http://localhost:5173", True),
        ("https://dash.example.com/", False),  # browsers send no path: it would never match
        ("dash.example.com", False),
        ("", False),
    ],
)
def test_dashboard_origin_pattern(template: dict[str, Any], value: str, ok: bool) -> None:
    param = template["Parameters"]["DashboardOrigin"]
    matches = re.fullmatch(param["AllowedPattern"], value) is not None
    assert (matches and param["MinLength"] <= len(value) <= param["MaxLength"]) is ok
