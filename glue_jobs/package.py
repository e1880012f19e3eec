"""Build the --extra-py-files zip of the Glue jobs (the `headwater` package and the jobs'
`rollup` and `indexer` packages) and optionally upload it where template.yaml points the job:
s3://<DataBucket>/glue/headwater-rollup.zip.

    .venv/bin/python glue_jobs/package.py                      # build only
    .venv/bin/python glue_jobs/package.py --bucket <DataBucketName> [--profile p]
    .venv/bin/python glue_jobs/package.py --stack <stack name>    # bucket from the outputs

A plain `sam deploy` needs none of these: the stack's GlueLibrary custom resource runs
`handler` below (GlueLibraryFunction: this directory as its code, the Headwater layer for the
`headwater` package) and uploads the same zip on every deploy that changes either.

Third-party runtime dependencies are not in the zip: Glue 5.0 ships boto3, and the job
installs orjson with --additional-python-modules (template.yaml)."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "dist" / "headwater-rollup.zip"
S3_KEY = "glue/headwater-rollup.zip"


def packages() -> dict[str, Path]:
    """The zip's packages: `headwater` wherever it is imported from (the source tree here,
    the Headwater layer's /opt/python in the custom resource's function), the jobs' own
    packages from beside this file."""
    import headwater

    return {
        "headwater": Path(headwater.__file__).resolve().parent,
        "rollup": HERE / "rollup",
        "indexer": HERE / "indexer",
    }


def build(out: Path = DEFAULT_OUT) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, root in packages().items():
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    zf.write(path, f"{name}/{path.relative_to(root).as_posix()}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--bucket", help="upload to s3://BUCKET/" + S3_KEY)
    p.add_argument("--stack", help="upload to the DataBucketName output of this stack")
    p.add_argument("--profile", default=None)
    p.add_argument("--endpoint-url", default=None)
    args = p.parse_args(argv)
    out = build(args.out)
    print(f"built {out} ({out.stat().st_size} bytes)")
    if args.bucket or args.stack:
        import boto3

        session = boto3.Session(profile_name=args.profile)
        bucket = args.bucket or stack_bucket(session.client("cloudformation"), args.stack)
        s3 = session.client("s3", endpoint_url=args.endpoint_url)
        s3.upload_file(str(out), bucket, S3_KEY)
        print(f"uploaded s3://{bucket}/{S3_KEY}")
    return 0


def handler(event: dict[str, Any], context: Any) -> None:
    """The GlueLibrary custom resource (template.yaml): Create and Update build the zip and
    put it at s3://<Bucket>/<Key>; Delete removes it. Always answers CloudFormation (a
    custom resource that never answers holds the stack for an hour): FAILED with the reason
    when the upload failed, so the deploy stops and rolls back."""
    import boto3

    props = event.get("ResourceProperties") or {}
    bucket, key = str(props.get("Bucket", "")), str(props.get("Key") or S3_KEY)
    physical = f"s3://{bucket}/{key}"
    status, reason = "SUCCESS", ""
    try:
        s3 = boto3.client("s3")
        if event["RequestType"] in ("Create", "Update"):
            out = build(Path("/tmp") / "headwater-rollup.zip")
            s3.upload_file(str(out), bucket, key)
        elif event["RequestType"] == "Delete" and bucket:
            try:
                s3.delete_object(Bucket=bucket, Key=key)
            except Exception as exc:  # a retained or emptied bucket: nothing to remove
                print(json.dumps({"message": "library not removed", "error": repr(exc)}))
    except Exception as exc:
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"[:1000]
    print(
        json.dumps(
            {
                "message": "glue library",
                "request": event["RequestType"],
                "status": status,
                "reason": reason,
                "object": physical,
            }
        )
    )
    _answer(event, status, reason, physical, {"Uri": physical})


def _answer(
    event: dict[str, Any], status: str, reason: str, physical: str, data: dict[str, str]
) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason or "see the function's log",
            "PhysicalResourceId": physical,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"],
        data=body,
        method="PUT",
        headers={"content-type": "", "content-length": str(len(body))},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def stack_bucket(cloudformation: Any, stack: str) -> str:
    """The stack's DataBucketName output (template.yaml Outputs)."""
    [desc] = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    for out in desc.get("Outputs", []):
        if out["OutputKey"] == "DataBucketName":
            return str(out["OutputValue"])
    raise SystemExit(f"stack {stack} has no DataBucketName output")


if __name__ == "__main__":
    sys.exit(main())
