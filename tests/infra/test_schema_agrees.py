"""template.yaml declares exactly the tables and bucket of headwater.storage.schema."""

from __future__ import annotations

from typing import Any

import pytest

from headwater import settings as hw_settings
from headwater.storage.schema import BUCKET_LOGICAL_ID, TABLES, Table

pytestmark = pytest.mark.infra


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _props(template: dict[str, Any], table: Table) -> dict[str, Any]:
    resource = template["Resources"].get(table.cfn_logical_id)
    assert resource is not None, f"{table.cfn_logical_id} missing from template.yaml"
    assert resource["Type"] == "AWS::DynamoDB::Table"
    return dict(resource["Properties"])


def test_no_extra_or_missing_tables(template: dict[str, Any]) -> None:
    # GIVEN the schema WHEN we list the template's tables THEN the sets are equal
    declared = set(_resources(template, "AWS::DynamoDB::Table"))
    assert declared == {t.cfn_logical_id for t in TABLES}


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.logical)
def test_table_matches_schema(template: dict[str, Any], table: Table) -> None:
    props = _props(template, table)
    expected = table.create_table_kwargs("x")

    assert props["TableName"] == {"Fn::Sub": f"${{AWS::StackName}}-{table.logical}"}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert (
        sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"])
        == expected["AttributeDefinitions"]
    )
    assert props["KeySchema"] == expected["KeySchema"]

    got_gsis = sorted(props.get("GlobalSecondaryIndexes", []), key=lambda g: g["IndexName"])
    want_gsis = sorted(expected.get("GlobalSecondaryIndexes", []), key=lambda g: g["IndexName"])
    assert [
        {"IndexName": g["IndexName"], "KeySchema": g["KeySchema"], "Projection": g["Projection"]}
        for g in got_gsis
    ] == want_gsis
    assert "LocalSecondaryIndexes" not in props

    ttl = props.get("TimeToLiveSpecification")
    if table.ttl_attribute:
        assert ttl == {"AttributeName": table.ttl_attribute, "Enabled": True}
    else:
        assert ttl is None

    stream = props.get("StreamSpecification")
    if table.stream:
        assert stream == {"StreamViewType": table.stream}
    else:
        assert stream is None

    assert props.get("SSESpecification", {}).get("SSEEnabled") is True


@pytest.mark.parametrize("logical", ["heads", "log"])
def test_durable_tables_have_point_in_time_recovery(template: dict[str, Any], logical: str) -> None:
    table = next(t for t in TABLES if t.logical == logical)
    pitr = _props(template, table).get("PointInTimeRecoverySpecification", {})
    assert pitr.get("PointInTimeRecoveryEnabled") is True


def test_bucket_is_encrypted_and_private(template: dict[str, Any]) -> None:
    buckets = _resources(template, "AWS::S3::Bucket")
    assert set(buckets) == {BUCKET_LOGICAL_ID}
    props = buckets[BUCKET_LOGICAL_ID]["Properties"]
    assert "BucketName" not in props  # CloudFormation names it; code reads HEADWATER_BUCKET

    rules = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rules and all(
        r["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"} for r in rules
    )
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]


def test_function_env_uses_the_settings_names(template: dict[str, Any]) -> None:
    # The names are spelled once, in headwater.settings; the template must use those.
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env[hw_settings.ENV_RESOURCE_PREFIX] == {"Fn::Sub": "${AWS::StackName}"}
    assert env[hw_settings.ENV_BUCKET] == {"Ref": BUCKET_LOGICAL_ID}
    assert env[hw_settings.ENV_API_KEYS_PARAMETER] == {"Ref": "ApiKeysParameterName"}
    # Keys never travel as plain text in the template.
    assert hw_settings.ENV_API_KEYS not in env
    default_param = template["Parameters"]["ApiKeysParameterName"]["Default"]
    assert default_param.startswith("/"), "an empty default would mean auth off on a public URL"


def test_stream_function_is_wired_for_the_web_adapter(template: dict[str, Any]) -> None:
    fn = template["Resources"]["StreamFunction"]["Properties"]
    env = fn["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/v0/health"
    assert fn["Handler"] == "run.sh"
    assert fn["FunctionUrlConfig"]["InvokeMode"] == "RESPONSE_STREAM"
    api = template["Resources"]["ApiFunction"]["Properties"]
    assert api["FunctionUrlConfig"]["InvokeMode"] == "BUFFERED"


def test_notifications_are_wired(template: dict[str, Any]) -> None:
    """/api/v1: the schema URI reaches every function, the StreamFunction knows its own
    timeout (watches close before it), and browsers may send and read X-Request-ID."""
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env[hw_settings.ENV_NOTIFICATION_SCHEMA] == {"Ref": "NotificationSchemaUri"}
    assert template["Parameters"]["NotificationSchemaUri"]["Default"] == ""
    stream = template["Resources"]["StreamFunction"]["Properties"]
    assert stream["Environment"]["Variables"][hw_settings.ENV_LAMBDA_TIMEOUT_SEC] == {
        "Ref": "StreamTimeoutSeconds"
    }
    assert stream["Timeout"] == {"Ref": "StreamTimeoutSeconds"}
    # X-Request-ID: CORS is the app's (tests/api/test_cors.py: every header exposed); the
    # function URLs add none of their own
    for name in ("ApiFunction", "StreamFunction"):
        assert "Cors" not in template["Resources"][name]["Properties"]["FunctionUrlConfig"]


def test_flags_are_wired(template: dict[str, Any]) -> None:
    """The flag tokens and the signing key reach every function by SSM parameter name (never
    as plain text), and the HTTP functions may read exactly those parameters when set."""
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env[hw_settings.ENV_FLAG_TOKENS_PARAMETER] == {"Ref": "FlagTokensParameterName"}
    assert env[hw_settings.ENV_SIGNING_KEY_PARAMETER] == {"Ref": "SigningKeyParameterName"}
    assert hw_settings.ENV_FLAG_TOKENS not in env and hw_settings.ENV_SIGNING_KEY not in env
    statements = template["Resources"]["AppDataAccessPolicy"]["Properties"]["PolicyDocument"][
        "Statement"
    ]
    conditional = {
        s["Fn::If"][0]: s["Fn::If"][1] for s in statements if isinstance(s, dict) and "Fn::If" in s
    }
    # each: an SSM parameter, or a Secrets Manager secret (`secret:<name>`; the other
    # branch, tests/infra/test_deployable_stack.py)
    tokens_secret, tokens_ssm = conditional["HasFlagTokens"]["Fn::If"][1:]
    assert tokens_ssm["Action"] == ["ssm:GetParameter"]
    assert "${FlagTokensParameterName}" in tokens_ssm["Resource"]["Fn::Sub"]
    assert tokens_secret["Action"] == ["secretsmanager:GetSecretValue"]
    _key_secret, key_ssm = conditional["HasSigningKey"]["Fn::If"][1:]
    assert "${SigningKeyParameterName}" in key_ssm["Resource"]["Fn::Sub"]
