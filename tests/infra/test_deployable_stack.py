"""template.yaml deploys and runs without a follow-up step or a hand edit (issue: the
serverless hot path and an operable stack): secrets from SSM or Secrets Manager with IAM to
match, X-Ray as an option, timeouts above the longest wait a function serves, reserved
concurrency and the Glue schedules as parameters, the Lambda Web Adapter's current layer and
settings, and the Glue jobs' library published by the stack itself (the GlueLibrary custom
resource, exercised here against moto with a local stand-in for CloudFormation's response
URL). Conditions are evaluated with the parameter values a deployer would pass, by a small
evaluator of the intrinsics the template uses."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import boto3
import pytest
from moto import mock_aws

from headwater.settings import LAMBDA_MAX_TIMEOUT_SEC, Settings

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::StackName": "hw",
}


# ------------------------------------------------------------------ a small evaluator
class Stack:
    """The template's conditions and values under given parameters (defaults otherwise)."""

    def __init__(self, template: dict[str, Any], **params: str) -> None:
        self.t = template
        self.params = {
            k: str(params.get(k, v.get("Default", ""))) for k, v in template["Parameters"].items()
        }
        self._conds: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self._conds:
            self._conds[name] = bool(self.value(self.t["Conditions"][name]))
        return self._conds[name]

    def value(self, node: Any) -> Any:  # one branch per intrinsic
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref":
                if arg == "AWS::NoValue":
                    return _NO_VALUE
                return self.params.get(arg, PSEUDO.get(arg, f"<{arg}>"))
            if key == "Condition":
                return self.condition(arg)
            if key == "Fn::Equals":
                a, b = (self.value(x) for x in arg)
                return str(a) == str(b)
            if key == "Fn::Not":
                return not self.value(arg[0])
            if key == "Fn::Or":
                return any(self.value(x) for x in arg)
            if key == "Fn::If":
                cond, yes, no = arg
                return self.value(yes if self.condition(cond) else no)
            if key == "Fn::Split":
                sep, text = arg
                return str(self.value(text)).split(sep)
            if key == "Fn::Select":
                index, items = arg
                return self.value(items)[int(self.value(index))]
            if key == "Fn::Sub":
                text, local = (arg, {}) if isinstance(arg, str) else arg
                names = {**self.params, **PSEUDO, **{k: self.value(v) for k, v in local.items()}}
                out = text
                for k, v in names.items():
                    out = out.replace("${" + k + "}", str(v))
                return re.sub(r"\$\{([A-Za-z0-9]+\.[A-Za-z0-9.]+)\}", r"<\1>", out)  # GetAtt
            if key == "Fn::GetAtt":
                return f"<{'.'.join(arg) if isinstance(arg, list) else arg}>"
        return {k: self.value(v) for k, v in node.items() if self.value(v) is not _NO_VALUE}


_NO_VALUE = object()


def _statements(stack: Stack, resource: str) -> list[dict[str, Any]]:
    props = stack.t["Resources"][resource]["Properties"]
    if "PolicyDocument" in props:
        doc = props["PolicyDocument"]
    else:  # an inline SAM policy
        [doc] = [p for p in props["Policies"] if isinstance(p, dict) and "Statement" in p]
    statements: list[dict[str, Any]] = stack.value(doc["Statement"])
    return statements


def _by_sid(statements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in statements}


# ------------------------------------------------------------------ secrets
@pytest.mark.parametrize("policy", ["AppDataAccessPolicy", "WsFunction"])
def test_api_keys_come_from_ssm_or_secrets_manager_with_iam_to_match(
    template: dict[str, Any], policy: str
) -> None:
    # GIVEN the default: an SSM parameter path
    ssm = _by_sid(_statements(Stack(template), policy))
    assert ssm["ApiKeysParameter"]["Action"] == ["ssm:GetParameter"]
    assert ssm["ApiKeysParameter"]["Resource"] == (
        "arn:aws:ssm:us-east-1:123456789012:parameter/headwater/dev/api-keys"
    )
    assert "ApiKeysParameterSecret" not in ssm
    # WHEN the deployer names a Secrets Manager secret THEN only that secret is readable
    secret = _by_sid(_statements(Stack(template, ApiKeysParameterName="secret:hw/keys"), policy))
    assert "ApiKeysParameter" not in secret
    assert secret["ApiKeysParameterSecret"]["Action"] == ["secretsmanager:GetSecretValue"]
    assert secret["ApiKeysParameterSecret"]["Resource"] == (
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:hw/keys-??????"
    )
    # AND a customer-managed key may decrypt through either service, and only through them
    via = secret["ApiKeysDecryptViaSsm"]["Condition"]["StringEquals"]["kms:ViaService"]
    assert sorted(via) == [
        "secretsmanager.us-east-1.amazonaws.com",
        "ssm.us-east-1.amazonaws.com",
    ]


def test_flag_secrets_follow_their_form_and_exist_only_when_named(
    template: dict[str, Any],
) -> None:
    none = _by_sid(_statements(Stack(template), "AppDataAccessPolicy"))
    assert not {s for s in none if s.startswith(("FlagTokens", "SigningKey"))}
    both = _by_sid(
        _statements(
            Stack(
                template,
                FlagTokensParameterName="secret:hw/flag-tokens",
                SigningKeyParameterName="/hw/signing-key",
            ),
            "AppDataAccessPolicy",
        )
    )
    assert both["FlagTokensParameterSecret"]["Resource"].endswith(":secret:hw/flag-tokens-??????")
    assert both["SigningKeyParameter"]["Resource"].endswith(":parameter/hw/signing-key")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("/headwater/dev/api-keys", True),
        ("secret:hw/keys", True),
        ("secret:prod_keys-1", True),
        ("headwater/keys", False),
        ("secret:", False),
        ("arn:aws:secretsmanager:us-east-1:1:secret:x", False),
    ],
)
def test_the_keys_parameter_pattern_takes_both_forms(
    template: dict[str, Any], value: str, valid: bool
) -> None:
    pattern = template["Parameters"]["ApiKeysParameterName"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, value)) is valid
    for optional in ("FlagTokensParameterName", "SigningKeyParameterName"):
        pattern = template["Parameters"][optional]["AllowedPattern"]
        assert bool(re.fullmatch(pattern, value)) is valid
        assert re.fullmatch(pattern, "")  # empty: not configured


def test_the_app_reads_a_secret_named_secret_colon(monkeypatch: pytest.MonkeyPatch) -> None:
    from headwater.parameters import load_secret

    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        boto3.client("secretsmanager").create_secret(Name="hw/keys", SecretString="k1::")
        assert load_secret("", "secret:hw/keys", "API keys") == "k1::"


# ------------------------------------------------------------------ tracing
def test_tracing_is_a_parameter_that_turns_on_xray_for_every_function(
    template: dict[str, Any],
) -> None:
    functions = [
        k for k, v in template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"
    ]
    for enabled, mode, disabled in (("false", "PassThrough", "true"), ("true", "Active", "false")):
        stack = Stack(template, EnableTracing=enabled)
        globals_fn = stack.value(template["Globals"]["Function"])
        assert globals_fn["Tracing"] == mode
        assert globals_fn["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == disabled
        for fn in functions:
            policies = stack.value(template["Resources"][fn]["Properties"]["Policies"])
            xray = [p for p in policies if p == "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"]
            assert len(xray) == (1 if enabled == "true" else 0), fn


TRACE_PROBE = """
import json, sys
from headwater.obs import traced
def handler(event, context):
    import boto3  # a call would be a subsegment: botocore is patched
    return {"ok": event["n"] + 1}
class Ctx:
    function_name = "hw-api"; memory_limit_in_mb = 128; aws_request_id = "r-1"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:hw-api"
wrapped = traced(handler)
out = wrapped({"n": 41}, Ctx())
patched = []
if "aws_xray_sdk" in sys.modules:
    from aws_xray_sdk.core import patcher
    patched = sorted(patcher._PATCHED_MODULES)
print(json.dumps({"same": wrapped is handler, "out": out, "patched": patched}))
"""


@pytest.mark.parametrize("disabled", ["true", "false"])
def test_the_tracer_wraps_handlers_only_when_tracing_is_on(disabled: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "layers" / "headwater"),
        "POWERTOOLS_TRACE_DISABLED": disabled,
        "AWS_LAMBDA_FUNCTION_NAME": "hw-api",
        "LAMBDA_TASK_ROOT": str(REPO / "functions" / "api"),
        "_X_AMZN_TRACE_ID": (
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
        ),
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",  # UDP: nothing needs to listen
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    done = subprocess.run(
        [sys.executable, "-c", TRACE_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["out"] == {"ok": 42}
    if disabled == "true":
        assert got == {"same": True, "out": {"ok": 42}, "patched": []}
    else:
        assert got["same"] is False
        assert "botocore" in got["patched"], got


# ------------------------------------------------------------------ timeouts, concurrency
def test_the_api_function_outlasts_the_longest_wait_it_serves(template: dict[str, Any]) -> None:
    from headwater.http.v1_common import LONG_POLL_CAP_MS

    api = template["Resources"]["ApiFunction"]["Properties"]
    timeout = api["Timeout"]
    longest_wait_s = max(Settings().limits.max_wait_ms, LONG_POLL_CAP_MS) / 1000
    assert timeout >= longest_wait_s + 5, (timeout, longest_wait_s)
    assert timeout <= LAMBDA_MAX_TIMEOUT_SEC
    # AND the app knows its own timeout (streams it serves there end before it)
    assert api["Environment"]["Variables"]["HEADWATER_LAMBDA_TIMEOUT_SEC"] == str(timeout)


@pytest.mark.parametrize("function", ["ApiFunction", "StreamFunction", "ForwarderFunction"])
def test_functions_that_append_outlast_an_appends_limit(
    template: dict[str, Any], function: str
) -> None:
    from headwater.engine.append import APPEND_LIMIT_S

    props = template["Resources"][function]["Properties"]
    timeout = props.get("Timeout", template["Globals"]["Function"].get("Timeout"))
    if isinstance(timeout, dict):  # a parameter: its least allowed value
        timeout = template["Parameters"][timeout["Ref"]]["MinValue"]
    # an append losing races gives up with a 503 before the function would time out on it
    assert timeout >= APPEND_LIMIT_S + 5, (function, timeout)


@pytest.mark.parametrize(
    ("function", "parameter"),
    [("ApiFunction", "ApiReservedConcurrency"), ("StreamFunction", "StreamReservedConcurrency")],
)
def test_reserved_concurrency_is_a_parameter(
    template: dict[str, Any], function: str, parameter: str
) -> None:
    props = template["Resources"][function]["Properties"]
    unset = Stack(template).value(props)
    assert "ReservedConcurrentExecutions" not in unset
    reserved = Stack(template, **{parameter: "25"}).value(props)
    assert reserved["ReservedConcurrentExecutions"] == "25"


# ------------------------------------------------------------------ the web adapter
def test_the_stream_function_runs_the_current_web_adapter_with_its_current_settings(
    template: dict[str, Any],
) -> None:
    props = Stack(template).value(template["Resources"]["StreamFunction"]["Properties"])
    [adapter] = [arn for arn in props["Layers"] if "LambdaAdapterLayer" in str(arn)]
    assert adapter == "arn:aws:lambda:us-east-1:753240598075:layer:LambdaAdapterLayerX86:27"
    env = props["Environment"]["Variables"]
    assert env["AWS_LWA_PORT"] == "8080" and "PORT" not in env
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/v0/health"
    assert env["AWS_LWA_READINESS_CHECK_HEALTHY_STATUS"] == "200-299"
    # 1.0 deprecates the non-prefixed names (README "Configurations")
    for old in ("READINESS_CHECK_PATH", "READINESS_CHECK_PORT", "ASYNC_INIT", "REMOVE_BASE_PATH"):
        assert old not in env
    run_sh = (REPO / "functions" / "stream" / "run.sh").read_text()
    assert '--port "${AWS_LWA_PORT:-${PORT:-8080}}"' in run_sh


def test_the_forwarder_may_query_the_heads_index(template: dict[str, Any]) -> None:
    statements = _by_sid(_statements(Stack(template), "ForwarderFunction"))
    resources = statements["ForwardTableItems"]["Resource"]
    assert "<HeadsTable.Arn>/index/*" in resources


# ------------------------------------------------------------------ Glue
@pytest.mark.parametrize(
    ("trigger", "parameter"),
    [("RollupSchedule", "RollupJobSchedule"), ("IndexSchedule", "IndexJobSchedule")],
)
def test_the_glue_schedules_and_their_switch_are_parameters(
    template: dict[str, Any], trigger: str, parameter: str
) -> None:
    resource = template["Resources"][trigger]
    assert resource["Properties"]["Schedule"] == {"Ref": parameter}
    assert template["Parameters"][parameter]["Default"].startswith("cron(")
    assert resource["Condition"] == "GlueScheduleOn"
    assert Stack(template).condition("GlueScheduleOn") is True
    assert Stack(template, GlueScheduleEnabled="false").condition("GlueScheduleOn") is False


@pytest.mark.parametrize("job", ["RollupJob", "IndexJob"])
def test_glue_jobs_take_the_library_the_stack_publishes_and_log_to_its_group(
    template: dict[str, Any], job: str
) -> None:
    args = template["Resources"][job]["Properties"]["DefaultArguments"]
    assert args["--extra-py-files"] == {"Fn::GetAtt": ["GlueLibrary", "Uri"]}
    assert args["--continuous-log-logGroup"] == {"Ref": "GlueJobsLogGroup"}
    group = template["Resources"]["GlueJobsLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert Stack(template).value(group["LogGroupName"]) == "/aws-glue/jobs/hw"


def test_the_library_is_rebuilt_when_its_code_or_the_layer_changes(
    template: dict[str, Any],
) -> None:
    library = template["Resources"]["GlueLibrary"]
    assert library["Type"] == "Custom::GlueLibrary"
    props = library["Properties"]
    fn = template["Resources"]["GlueLibraryFunction"]["Properties"]
    assert props["ServiceToken"] == {"Fn::GetAtt": ["GlueLibraryFunction", "Arn"]}
    assert props["CodeVersion"] == {"Ref": "GlueLibraryFunction.Version"}
    assert "AutoPublishAlias" in fn  # a new version (so an Update) whenever the code changes
    assert props["LayerVersion"] == {"Ref": "HeadwaterLayer"}
    assert (fn["CodeUri"], fn["Handler"]) == ("glue_jobs", "package.handler")
    [statement] = fn["Policies"][1]["Statement"]
    assert statement["Resource"] == {"Fn::Sub": "${DataBucket.Arn}/glue/*"}
    assert sorted(statement["Action"]) == ["s3:DeleteObject", "s3:PutObject"]


def test_make_deploy_is_just_sam_deploy() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ndeploy:", 1)[1].split("\n\n", 1)[0]
    assert "package.py" not in recipe and "sam deploy" in recipe


class _CloudFormation(BaseHTTPRequestHandler):
    """CloudFormation's pre-signed response URL: records what the custom resource answers."""

    answers: ClassVar[list[dict[str, Any]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.answers.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def response_url() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    answers: ClassVar[list[dict[str, Any]]] = []
    handler = type("Handler", (_CloudFormation,), {"answers": answers})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/cfn-response?sig=x", answers
    finally:
        server.shutdown()
        server.server_close()


def _package_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("glue_package", REPO / "glue_jobs" / "package.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(kind: str, url: str, bucket: str) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/hw/1",
        "RequestId": f"req-{kind}",
        "LogicalResourceId": "GlueLibrary",
        "ResourceType": "Custom::GlueLibrary",
        "ResourceProperties": {
            "ServiceToken": "arn",
            "Bucket": bucket,
            "Key": "glue/headwater-rollup.zip",
            "CodeVersion": "1",
        },
    }


def test_the_glue_library_resource_uploads_the_zip_and_answers_cloudformation(
    response_url: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, answers = response_url
    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    package = _package_module()
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="hw-data")
        # WHEN CloudFormation creates the resource
        package.handler(_event("Create", url, "hw-data"), None)
        # THEN the zip holds the headwater package and both jobs' packages
        blob = s3.get_object(Bucket="hw-data", Key="glue/headwater-rollup.zip")["Body"].read()
        names = set(zipfile.ZipFile(io.BytesIO(blob)).namelist())
        assert {"headwater/__init__.py", "rollup/__init__.py", "indexer/__init__.py"} <= names
        assert not any("__pycache__" in n for n in names)
        # AND CloudFormation was told, with the object's URI for the jobs' arguments
        assert answers[-1]["Status"] == "SUCCESS", answers
        assert answers[-1]["Data"] == {"Uri": "s3://hw-data/glue/headwater-rollup.zip"}
        assert answers[-1]["PhysicalResourceId"] == "s3://hw-data/glue/headwater-rollup.zip"
        assert (answers[-1]["RequestId"], answers[-1]["LogicalResourceId"]) == (
            "req-Create",
            "GlueLibrary",
        )
        # WHEN the stack is deleted THEN the object goes too
        package.handler(_event("Delete", url, "hw-data"), None)
        assert answers[-1]["Status"] == "SUCCESS"
        assert s3.list_objects_v2(Bucket="hw-data").get("KeyCount", 0) == 0
        # WHEN the upload fails (no such bucket) THEN CloudFormation hears FAILED and why
        package.handler(_event("Update", url, "hw-missing"), None)
        assert answers[-1]["Status"] == "FAILED"
        assert "NoSuchBucket" in answers[-1]["Reason"], answers[-1]
