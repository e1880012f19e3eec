"""Build the --extra-py-files zip of the rollup Glue job (the `headwater` package and the job's
`rollup` package) and optionally upload it where template.yaml points the job:
s3://<DataBucket>/glue/headwater-rollup.zip.

    .venv/bin/python glue_jobs/package.py                      # build only
    .venv/bin/python glue_jobs/package.py --bucket <DataBucketName> [--profile p]

Third-party runtime dependencies are not in the zip: Glue 5.0 ships boto3, and the job
installs orjson with --additional-python-modules (template.yaml)."""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "headwater": REPO / "layers" / "headwater" / "headwater",
    "rollup": REPO / "glue_jobs" / "rollup",
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
    p.add_argument("--profile", default=None)
    p.add_argument("--endpoint-url", default=None)
    args = p.parse_args(argv)
    out = build(args.out)
    print(f"built {out} ({out.stat().st_size} bytes)")
    if args.bucket:
        import boto3

        s3 = boto3.Session(profile_name=args.profile).client("s3", endpoint_url=args.endpoint_url)
        s3.upload_file(str(out), args.bucket, S3_KEY)
        print(f"uploaded s3://{args.bucket}/{S3_KEY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
