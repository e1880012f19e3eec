"""A SparkSession: Glue's when awsglue is importable (real Glue), a plain local one otherwise."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

# The folder holding the `rollup` package: local Python workers must be able to import it.
_JOBS_DIR = str(Path(__file__).resolve().parents[1])


def glue_available() -> bool:
    try:
        import awsglue.context  # noqa: F401
    except ImportError:
        return False
    return True


def local_session(master: str = "local[2]", shuffle_partitions: int = 4) -> SparkSession:
    """A local session whose Python workers run this interpreter and can import `rollup`
    (both must be set before the JVM starts: workers inherit its environment)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _JOBS_DIR not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_JOBS_DIR, *paths])
    return (
        SparkSession.builder.master(master)
        .appName("headwater-rollup")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )


class GlueRun:
    """The Glue job lifecycle (init/commit) when running under Glue; a no-op locally."""

    def __init__(self, spark: SparkSession, job_name: str | None) -> None:
        self._job: Any = None
        if job_name and glue_available():
            from awsglue.context import GlueContext
            from awsglue.job import Job

            self._job = Job(GlueContext(spark.sparkContext))
            self._job.init(job_name, {"JOB_NAME": job_name})

    def commit(self) -> None:
        if self._job is not None:
            self._job.commit()


def session() -> SparkSession:
    """Glue's session under Glue, a local one otherwise."""
    if glue_available():
        from awsglue.context import GlueContext
        from pyspark.context import SparkContext

        spark: SparkSession = GlueContext(SparkContext.getOrCreate()).spark_session
        return spark
    return local_session()
