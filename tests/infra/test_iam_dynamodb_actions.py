"""The HTTP functions' IAM grants cover every DynamoDB action the storage adapters call
(issue 23: the watch-session cap's sweep Scans the sessions table, which no grant allowed,
so on AWS every POST /v0/watch would fail once 10,000 sessions were abandoned).

What each adapter needs is read from the code, not listed here: every `self._ddb.<operation>`
an adapter method uses (directly, through a helper it hands the client to, or through the
methods it calls), on every table that method names, and the item actions its
TransactWriteItems items carry (IAM authorizes a transaction per item: Put, Update, Delete,
ConditionCheck). A method that names a secondary index needs the index's ARN too. The
result over-approximates (a method naming two tables is assumed to use each operation on
both), which errs towards a missing grant failing here."""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore import xform_name

from headwater.storage import schema

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "layers" / "headwater" / "headwater"
STORAGE = PACKAGE / "storage"
CLIENT_ATTR = "_ddb"  # every DynamoDB adapter keeps its client here

OPERATIONS = {
    xform_name(op): op
    for op in botocore.session.get_session().get_service_model("dynamodb").operation_names
}
# IAM has no TransactWriteItems/TransactGetItems action: each item is authorized by its own.
TRANSACT_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
IAM_ACTIONS = {*OPERATIONS.values(), *TRANSACT_ITEM_ACTIONS.values()}
TABLES = {t.logical: t for t in vars(schema).values() if isinstance(t, schema.Table)}
TABLE_CONSTANTS = {name: t for name, t in vars(schema).items() if isinstance(t, schema.Table)}


@dataclass(frozen=True, order=True)
class Need:
    action: str  # "dynamodb:Scan"
    table: str  # CloudFormation logical id: "SessionsTable"
    index: bool = False  # on the table's secondary indexes ("<arn>/index/*")
    where: str = field(default="", compare=False)  # module.Class.method


@dataclass
class _Uses:
    ops: set[str] = field(default_factory=set)
    tables: set[str] = field(default_factory=set)
    txn_kinds: set[str] = field(default_factory=set)
    index: bool = False
    # the tables whose indexes are named (`IndexName=HEADS.indexes[0].name`): only those
    # need the index ARN; an index named any other way counts for every table
    index_tables: set[str] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)


def _txn_kinds(node: ast.AST) -> set[str]:
    return {
        k.value
        for n in ast.walk(node)
        if isinstance(n, ast.Dict)
        for k in n.keys
        if isinstance(k, ast.Constant) and k.value in TRANSACT_ITEM_ACTIONS
    }


def _names_index(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Constant) and n.value == "IndexName")
        or (isinstance(n, ast.keyword) and n.arg == "IndexName")
        for n in ast.walk(node)
    )


def _index_tables(node: ast.AST) -> set[str] | None:
    """The tables (CloudFormation ids) whose index an IndexName names, None when one is
    named in a way that does not say whose."""
    out: set[str] = set()
    for n in ast.walk(node):
        value: ast.AST | None = None
        if isinstance(n, ast.keyword) and n.arg == "IndexName":
            value = n.value
        elif isinstance(n, ast.Dict):
            for k, v in zip(n.keys, n.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "IndexName":
                    value = v
        if value is None:
            continue
        named = {
            TABLE_CONSTANTS[x.id].cfn_logical_id
            for x in ast.walk(value)
            if isinstance(x, ast.Name) and x.id in TABLE_CONSTANTS
        }
        if not named:
            return None
        out |= named
    return out


def _is_client(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == CLIENT_ATTR
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _helpers() -> dict[str, ast.FunctionDef]:
    """Module-level functions of the storage package (a helper may take the client)."""
    out: dict[str, ast.FunctionDef] = {}
    for path in sorted(STORAGE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                out.setdefault(node.name, node)
    return out


def _helper_ops(fn: ast.FunctionDef, arg_index: int) -> set[str]:
    """Operations a helper calls on the client it received as its arg_index-th argument."""
    if arg_index >= len(fn.args.args):
        return set()
    param = fn.args.args[arg_index].arg
    return {
        n.attr
        for n in ast.walk(fn)
        if isinstance(n, ast.Attribute)
        and n.attr in OPERATIONS
        and isinstance(n.value, ast.Name)
        and n.value.id == param
    }


def _table_attrs(init: ast.FunctionDef) -> dict[str, schema.Table]:
    """self.<attr> = settings.table_name(<TABLE>.logical) in __init__."""
    out: dict[str, schema.Table] = {}
    for n in ast.walk(init):
        if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)):
            continue
        call = n.value
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "table_name"):
            continue
        [arg] = call.args
        assert isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name), ast.dump(arg)
        for target in n.targets:
            if isinstance(target, ast.Attribute):
                out[target.attr] = TABLE_CONSTANTS[arg.value.id]
    return out


def _method_uses(
    fn: ast.FunctionDef, tables: dict[str, schema.Table], helpers: dict[str, ast.FunctionDef]
) -> _Uses:
    uses = _Uses(txn_kinds=_txn_kinds(fn), index=_names_index(fn))
    if uses.index:
        whose = _index_tables(fn)
        uses.index_tables = (
            whose if whose is not None else {t.cfn_logical_id for t in TABLES.values()}
        )
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and _is_client(n.value) and n.attr in OPERATIONS:
            uses.ops.add(n.attr)
        elif (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and n.attr in tables
        ):
            uses.tables.add(tables[n.attr].cfn_logical_id)
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
                if n.func.value.id == "self":
                    uses.calls.add(n.func.attr)
            elif isinstance(n.func, ast.Name) and n.func.id in helpers:
                helper = helpers[n.func.id]
                uses.txn_kinds |= _txn_kinds(helper)
                for i, arg in enumerate(n.args):
                    if _is_client(arg):
                        uses.ops |= _helper_ops(helper, i)
    return uses


def adapter_needs() -> dict[str, list[Need]]:
    """Adapter class name -> the DynamoDB grants its methods need."""
    helpers = _helpers()
    out: dict[str, list[Need]] = {}
    for path in sorted(STORAGE.glob("*.py")):
        for cls in ast.parse(path.read_text()).body:
            if not isinstance(cls, ast.ClassDef):
                continue
            methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
            init = methods.get("__init__")
            if init is None or not any(
                isinstance(n, ast.Attribute) and _is_client(n) for n in ast.walk(init)
            ):
                continue
            tables = _table_attrs(init)
            uses = {name: _method_uses(fn, tables, helpers) for name, fn in methods.items()}
            needs: list[Need] = []
            for name in methods:
                seen, todo, total = {name}, [name], _Uses()
                while todo:  # the method and every method of the class it calls
                    u = uses[todo.pop()]
                    total.ops |= u.ops
                    total.tables |= u.tables
                    total.txn_kinds |= u.txn_kinds
                    total.index |= u.index
                    total.index_tables |= u.index_tables
                    for callee in u.calls - seen:
                        if callee in uses:
                            seen.add(callee)
                            todo.append(callee)
                actions: set[str] = set()
                for op in total.ops:
                    if op == "transact_write_items":
                        actions |= {TRANSACT_ITEM_ACTIONS[k] for k in total.txn_kinds}
                    elif op == "transact_get_items":
                        actions.add("GetItem")
                    else:
                        actions.add(OPERATIONS[op])
                where = f"{path.stem}.{cls.name}.{name}"
                for action in sorted(actions):
                    for table in sorted(total.tables):
                        needs.append(Need(f"dynamodb:{action}", table, False, where))
                        if table in total.index_tables and action in ("Query", "Scan"):
                            needs.append(Need(f"dynamodb:{action}", table, True, where))
            out[cls.name] = needs
    return out


# --- what the template grants -------------------------------------------------------------
def _resource_tables(resource: Any) -> Iterator[tuple[str, bool]]:
    """(table logical id, on its indexes) for a resource naming a Headwater table."""
    if resource == "*":
        for t in TABLES.values():
            yield t.cfn_logical_id, False
            yield t.cfn_logical_id, True
    elif isinstance(resource, dict) and "Fn::GetAtt" in resource:
        target, attr = resource["Fn::GetAtt"]
        if attr == "Arn":
            yield target, False
    elif isinstance(resource, dict) and isinstance(resource.get("Fn::Sub"), str):
        text = resource["Fn::Sub"]
        for t in TABLES.values():
            if text == f"${{{t.cfn_logical_id}.Arn}}/index/*":
                yield t.cfn_logical_id, True


def _statements(template: dict[str, Any], function: str) -> Iterator[dict[str, Any]]:
    for policy in template["Resources"][function]["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Ref" in policy:
            managed = template["Resources"][policy["Ref"]]
            assert managed["Type"] == "AWS::IAM::ManagedPolicy", policy
            yield from managed["Properties"]["PolicyDocument"]["Statement"]
        elif isinstance(policy, dict) and "Statement" in policy:
            yield from policy["Statement"]
        elif isinstance(policy, dict) and _is_xray_policy(policy):
            continue  # AWSXrayWriteOnlyAccess with EnableTracing: no DynamoDB action
        else:
            raise AssertionError(f"{function}: a policy this test cannot read: {policy}")


def granted(template: dict[str, Any], function: str) -> set[tuple[str, str, bool]]:
    out: set[tuple[str, str, bool]] = set()
    for s in _statements(template, function):
        if "Fn::If" in s or s.get("Effect") != "Allow" or "Condition" in s:
            continue  # conditional grants are not counted on
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        for resource in resources:
            for table, index in _resource_tables(resource):
                for op in IAM_ACTIONS:
                    if any(fnmatch.fnmatchcase(f"dynamodb:{op}", a) for a in actions):
                        out.add((f"dynamodb:{op}", table, index))
    return out


def http_functions(template: dict[str, Any]) -> list[str]:
    """The functions whose code serves the HTTP app (create_app)."""
    out = []
    for name, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        code = REPO / res["Properties"]["CodeUri"]
        if any("create_app" in f.read_text() for f in code.iterdir() if f.is_file()):
            out.append(name)
    return sorted(out)


# --- the check -----------------------------------------------------------------------------
def _assert_the_scan_sees_the_adapters(needs: dict[str, list[Need]]) -> None:
    """The derivation is not vacuous: it covers every DynamoDB adapter the app builds and
    finds what is known to be there (the issue's Scan among it)."""
    built = {
        n.id
        for root in ("services.py", "engines.py")  # the composition root and the engines'
        for n in ast.walk(ast.parse((PACKAGE / root).read_text()))
        if isinstance(n, ast.Name)
    }
    # and the parts an adapter builds over its own client (DynamoLogTailStore's DynamoFrameChain):
    # their needs are the adapter's, granted to the same functions
    built |= {
        n.func.id
        for path in sorted(STORAGE.glob("*.py"))
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in needs
        and any(_is_client(a) or (isinstance(a, ast.Name) and a.id == "client") for a in n.args)
    }
    assert {c for c in built if c.startswith("Dynamo")} == set(needs)
    for cls, n in needs.items():
        assert n, f"{cls}: no DynamoDB call found"
    flat = {(n.action, n.table, n.index, n.where) for ns in needs.values() for n in ns}
    for known in [
        ("dynamodb:Scan", "SessionsTable", False, "sessions.DynamoSessionStore.sweep"),
        ("dynamodb:DeleteItem", "SessionsTable", False, "sessions.DynamoSessionStore.sweep"),
        ("dynamodb:Query", "HeadsTable", True, "heads.DynamoHeadStore.count_live"),
        ("dynamodb:PutItem", "LogTable", False, "log_tail.DynamoLogTailStore.commit_append"),
        ("dynamodb:UpdateItem", "HeadsTable", False, "heads.DynamoHeadStore.reserve"),
        ("dynamodb:Query", "LogTable", False, "frame_chain.DynamoFrameChain.walk"),
    ]:
        assert known in flat, known
    assert not any(n.action == "dynamodb:TransactWriteItems" for ns in needs.values() for n in ns)


def test_http_functions_are_granted_every_dynamodb_action_the_adapters_call(
    template: dict[str, Any],
) -> None:
    needs = adapter_needs()
    _assert_the_scan_sees_the_adapters(needs)
    functions = http_functions(template)
    assert functions == ["ApiFunction", "StreamFunction"]
    every = [n for ns in needs.values() for n in ns]
    for function in functions:
        have = granted(template, function)
        missing = sorted(
            {
                f"{n.action} on {n.table}{'/index/*' if n.index else ''} ({n.where})"
                for n in every
                if (n.action, n.table, n.index) not in have
            }
        )
        assert not missing, f"{function} lacks:\n" + "\n".join(missing)
        # and Scan, the costly read, only where an adapter scans
        wanted = {(n.action, n.table, n.index) for n in every}
        for action, table, index in have:
            if action == "dynamodb:Scan":
                assert (action, table, index) in wanted, (function, table, index)


def _is_xray_policy(policy: dict[str, Any]) -> bool:
    branches = policy.get("Fn::If", [None, None, None])[1:]
    return any(
        isinstance(b, dict) and str(b.get("Fn::Sub", "")).endswith(":policy/AWSXrayWriteOnlyAccess")
        for b in branches
    )
