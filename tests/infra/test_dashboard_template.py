"""template.yaml wires the /api/v2 dashboard (docs/dashboard.md) the way the app expects:
the configurations table is declared and granted to the HTTP functions with exactly the
item actions storage/dashboard_configs.py uses, both functions get the dashboard settings
from stack parameters, CORS (the app's, one source for both function URLs) admits the
dashboard origin, and the rollup job counts the same topic."""

from __future__ import annotations

import re
from typing import Any

import pytest

from headwater import settings as hw_settings
from headwater.settings import ENV_CORS_ORIGINS, Settings
from headwater.storage.schema import DASHBOARD

pytestmark = pytest.mark.infra

APP_FUNCTIONS = ("ApiFunction", "StreamFunction")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _function(template: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(template["Resources"][name]["Properties"])


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
def test_cors_has_one_source_the_app(template: dict[str, Any], name: str) -> None:
    # The function URLs carry no CORS configuration (it would answer preflights and add its
    # own headers besides the app's); the app gets the origins from the parameters.
    assert "Cors" not in _function(template, name)["FunctionUrlConfig"]
    env = _function(template, name)["Environment"]["Variables"]
    assert env[ENV_CORS_ORIGINS] == {
        "Fn::If": [
            "DashboardOriginIsExtra",
            {"Fn::Sub": "${CorsAllowOrigin},${DashboardOrigin}"},
            {"Ref": "CorsAllowOrigin"},
        ]
    }


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
    if isinstance(expr, dict) and "Fn::Sub" in expr:
        text = expr["Fn::Sub"]
        for k, v in params.items():
            text = text.replace("${" + k + "}", v)
        return text
    return expr


def _origins(template: dict[str, Any], name: str, params: dict[str, str]) -> list[str]:
    """The origins the app admits, from HEADWATER_CORS_ORIGINS as CloudFormation resolves it
    for the given parameter values and as the app's settings read it."""
    item = _function(template, name)["Environment"]["Variables"][ENV_CORS_ORIGINS]
    cond, yes, no = item["Fn::If"]
    chosen = yes if _condition(template, template["Conditions"][cond], params) else no
    return list(Settings.from_env({ENV_CORS_ORIGINS: _value(chosen, params)}).cors_origins)


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
        assert len(origins) == len(set(origins))
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
