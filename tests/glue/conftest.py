"""Glue tier: one local SparkSession for the whole test session (the JVM start is the slow
part), one core, few shuffle partitions, no UI. The job's package (glue_jobs/rollup) is put
on sys.path here; its Python workers find it through PYTHONPATH (rollup.spark)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

JOBS_DIR = str(Path(__file__).resolve().parents[2] / "glue_jobs")
if JOBS_DIR not in sys.path:
    sys.path.insert(0, JOBS_DIR)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from rollup.spark import local_session

    session = local_session(master="local[1]", shuffle_partitions=2)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
