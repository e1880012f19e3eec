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


@pytest.fixture(scope="module", autouse=True)
def _emulator_endpoints_end_with_the_module() -> Iterator[None]:
    """Glue modules point boto3 at their own emulator through the AWS_ENDPOINT_URL* variables
    (tests.e2e.conftest._session sets them); they must not outlive the module: under
    pytest-xdist the next module on this worker may be an in-process moto one."""
    from headwater.dev.emulator import endpoints_restored

    with endpoints_restored():
        yield
