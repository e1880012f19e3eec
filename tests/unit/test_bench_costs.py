"""bench/bench_costs.py: idle cost follows the template (schedules, workers, alarms), and
every per-surface row is backed by a workload in the latest results."""

from __future__ import annotations

import copy

import pytest
from bench import bench_costs


def test_runs_per_month_of_the_cron_forms_the_template_uses() -> None:
    assert bench_costs._runs_per_month("cron(0/15 * * * ? *)") == 4 * 730
    assert bench_costs._runs_per_month("cron(*/5 * * * ? *)") == 12 * 730
    assert bench_costs._runs_per_month("cron(0 * * * ? *)") == 730
    assert bench_costs._runs_per_month("cron(0,30 * * * ? *)") == 2 * 730


def test_idle_cost_follows_the_templates_glue_workers_and_alarms() -> None:
    tpl = bench_costs._template()
    base = bench_costs.idle_month(tpl)
    glue = next(r for r in base["rows"] if r["item"].startswith("Glue RollupJob"))
    # 2 DPU, 2,920 runs a month, a minute each at $0.44 per DPU-hour
    assert glue["usd"] == pytest.approx(2920 * 2 / 60 * 0.44)
    bigger = copy.deepcopy(tpl)
    bigger["Resources"]["RollupJob"]["Properties"]["NumberOfWorkers"] = 4
    doubled = next(r for r in bench_costs.idle_month(bigger)["rows"] if "RollupJob" in r["item"])
    assert doubled["usd"] == pytest.approx(2 * glue["usd"])
    alarms = sum(1 for r in tpl["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm")
    [row] = [r for r in base["rows"] if r["item"].startswith("CloudWatch alarms")]
    assert row["usd"] == pytest.approx(0.10 * alarms)
    assert base["usd_total"] == pytest.approx(sum(r["usd"] for r in base["rows"]))


def test_every_surface_row_comes_from_a_measured_workload() -> None:
    rows = bench_costs.per_million()
    assert len(rows) == len(bench_costs.SURFACE_ROWS)
    for row in rows:
        assert "missing" not in row, row
        assert row["usd_total"] >= row["usd_aws"] > 0, row
