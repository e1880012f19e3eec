"""Build the --extra-py-files zip of the Glue jobs (the `headwater` package and the jobs'
`rollup` and `indexer` packages) and optionally upload it where template.yaml points the job:
s3://<DataBucket>/glue/headwater-rollup.zip.

    .venv/bin/python glue_jobs/package.py                      # build only
    .venv/bin/python glue_jobs/package.py --bucket <DataBucketName> [--profile p]
    .venv/bin/python glue_jobs/package.py --stack <stack name>    # bucket from the outputs

`make deploy` runs the last form after `sam deploy`.

Third-party runtime dependencies are not in the zip: Glue 5.0 ships boto3, and the job
installs orjson with --additional-python-modules (template.yaml)."""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "headwater": REPO / "layers" / "headwater" / "headwater",
    "rollup": REPO / "glue_jobs" / "rollup",
    "indexer": REPO / "glue_jobs" / "indexer",
}
DEFAULT_OUT = REPO / "glue_jobs" / "dist" / "headwater-rollup.zip"
S3_KEY = "glue/headwater-rollup.zip"


def build(out: Path = DEFAULT_OUT) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, root in PACKAGES.items():
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


def stack_bucket(cloudformation: Any, stack: str) -> str:
    """The stack's DataBucketName output (template.yaml Outputs)."""
    [desc] = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    for out in desc.get("Outputs", []):
        if out["OutputKey"] == "DataBucketName":
            return str(out["OutputValue"])
    raise SystemExit(f"stack {stack} has no DataBucketName output")


if __name__ == "__main__":
    sys.exit(main())
