"""bench/figures.py (issue 43): the figures README.md and docs/*.md quote are rendered from
the results files they name, each with the date and commit it was measured on. The check
fails on a body edited by hand, on a results file that no longer says what the page shows, on
a figure without its date and commit, and on a dollar figure that does not come from a
region."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
from bench import figures

REPO = figures.REPO


def _page(tmp_path: Path, text: str, name: str = "page.md") -> Path:
    page = tmp_path / name
    page.write_text(text)
    return page


def _problems(page: Path, results: Path = figures.RESULTS) -> list[str]:
    return figures.check([page], results=results).problems


def test_every_figure_of_the_docs_is_what_its_results_file_says() -> None:
    report = figures.check()
    assert report.problems == []
    quoted = {s.file for r in report.regions for s in r.used if s.kind == "results"}
    # the pages the issue names quote their figures through regions
    on = {r.page.name for r in report.regions}
    assert {"benchmarks.md", "scaling.md", "costs.md", "scale-model.md"} <= on
    assert {"latest-v0.json", "latest-scale-model.json", "latest-writers.json"} <= quoted


def test_the_check_runs_no_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A clean clone of any depth, or none (an export), checks the same: superseded runs are
    read from bench/results/archive/, stamps from bench/results/stamps.json."""

    # GIVEN no git: not on PATH, and any subprocess this process starts raises
    def no_git(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"the check ran a subprocess: {args}")

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setattr(subprocess, "Popen", no_git)
    # THEN every page passes, quoting files as committed at a revision and stamped files
    report = figures.check()
    assert report.problems == []
    used = {(s.file, s.rev, s.recorded) for r in report.regions for s in r.used}
    assert ("latest-scale-model.json", "688b924", True) in used
    assert ("latest-coldstart.json", "9fc28cc", False) in used
    assert ("latest-costs.json", None, False) in used
    # and a missing archive copy is reported as missing, not as a git failure
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    (results / "archive" / "latest-scale-model@688b924.json").unlink()
    problems = figures.check(results=results).problems
    assert problems and all("latest-scale-model@688b924.json is missing" in p for p in problems)


def test_the_check_passes_in_a_copy_without_git_history(tmp_path: Path) -> None:
    # GIVEN README.md, docs/ and bench/ copied where there is no repository, and no git on PATH
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    for tree in ("docs", "bench"):
        shutil.copytree(REPO / tree, tmp_path / tree, ignore=shutil.ignore_patterns("__pycache__"))
    path = [str(tmp_path), str(REPO / "layers" / "headwater"), str(REPO / "clients" / "python")]
    env = {"PATH": str(tmp_path / "no-bin"), "PYTHONPATH": os.pathsep.join(path)}
    # THEN `python -m bench.figures --check` passes there
    r = subprocess.run(
        [sys.executable, "-m", "bench.figures", "--check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(" figures regions, 0 problems\n")
    # and fails, saying what is missing, once an archive copy is gone
    (tmp_path / "bench" / "results" / "archive" / "latest-flags@f27d5d0.json").unlink()
    r = subprocess.run(
        [sys.executable, "-m", "bench.figures", "--check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert "bench/results/archive/latest-flags@f27d5d0.json is missing" in r.stderr


def test_a_figure_edited_by_hand_fails_the_check(tmp_path: Path) -> None:
    # GIVEN scaling.md as committed, with one digit of a rendered table changed
    text = (REPO / "docs" / "scaling.md").read_text()
    table_row = re.search(r"^\| 1 \| (\d+) \(old: ", text, re.M)
    assert table_row is not None
    shown = table_row.group(1)
    doctored = text.replace(table_row.group(0), table_row.group(0).replace(shown, shown + "1"))
    page = _page(tmp_path, doctored, "scaling.md")
    # THEN the check names the region and both values; WHEN written, the figure is restored
    problems = _problems(page)
    assert any("not what its template renders" in p and shown + "1" in p for p in problems)
    assert figures.check([page], write=True).problems == []
    assert page.read_text() == text


def test_a_results_file_that_changed_fails_the_check(tmp_path: Path) -> None:
    # GIVEN a copy of bench/results in which one writers run measured twice the records/s
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    data = json.loads((results / "latest-writers.json").read_text())
    row = next(r for r in data["results"] if r["writers"] == 8 and r["code"] == "c3f1b17")
    row["records_per_s"] *= 2
    (results / "latest-writers.json").write_text(json.dumps(data))
    # THEN scaling.md, which quotes it, no longer passes against that copy
    problems = _problems(REPO / "docs" / "scaling.md", results)
    assert len(problems) == 1 and "not what its template renders" in problems[0]
    assert f"| 8 | {row['records_per_s']:,.0f} (old:" in problems[0]


def test_a_figure_without_its_date_and_commit_fails(tmp_path: Path) -> None:
    template = (
        "# A\n\n<!-- figures\n{{ v0.workloads['append-b1000'].records_per_s |,.0f }} rec/s\n"
        "-->\n<!-- /figures -->\n"
    )
    page = _page(tmp_path, template)
    figures.check([page], write=True)
    assert "41,335 rec/s" in page.read_text()
    assert any("without its date and commit" in p for p in _problems(page))
    # the stamp may be in another region of the same section, not of another section
    stamped = page.read_text() + "\n<!-- figures\n({{ v0 |when }})\n-->\n<!-- /figures -->\n"
    page.write_text(stamped)
    figures.check([page], write=True)
    assert _problems(page) == []
    assert "(2026-11-21 on e0ebd37)" in page.read_text()
    page.write_text(stamped.replace("\n<!-- figures\n(", "\n## B\n<!-- figures\n("))
    figures.check([page], write=True)
    assert any("without its date and commit" in p for p in _problems(page))


def test_a_dollar_figure_must_come_from_a_region(tmp_path: Path) -> None:
    outside = _page(tmp_path, "# A\n\nAn append costs $1.25 per million.\n", "outside.md")
    assert any("dollar figure outside" in p for p in _problems(outside))
    in_code = _page(tmp_path, "# A\n\n```text\n$1.25/M\n```\n", "code.md")
    assert _problems(in_code) == []
    literal = _page(
        tmp_path,
        "# A\n<!-- figures\n$1.25 at {{ price |stamp }}\n-->\n<!-- /figures -->\n",
        "literal.md",
    )
    assert any("literal dollar figure" in p for p in _problems(literal))
    priced = _page(
        tmp_path,
        "# A\n<!-- figures\n${{ 2 * price.dynamodb_wru_per_million |.2f }} ({{ price |when }})"
        "\n-->\n<!-- /figures -->\n",
        "priced.md",
    )
    figures.check([priced], write=True)
    assert "$1.25 (list prices as of 2024-11-01)" in priced.read_text()
    assert _problems(priced) == []


def test_templates_say_their_precision_and_pick_values_by_name(tmp_path: Path) -> None:
    def rendered(expr: str, decl: str = "") -> str:
        page = _page(
            tmp_path,
            f"<!-- figures {decl}\n{expr}\n{{{{ v0 |when }}}}\n-->\n<!-- /figures -->\n",
        )
        report = figures.check([page], write=True)
        assert report.problems == [], report.problems
        return page.read_text().split("-->\n", 1)[1].split("\n")[0]

    assert rendered("{{ v0.workloads['append-1x32'].p99_ms |.1f }}") == "106.6"
    assert rendered("{{ v0.workloads[0].workload.name }}") == "append-b1"
    # a file as committed at a revision: read from its copy in bench/results/archive/
    assert rendered(
        "{{ old.settings.small_conc |d }} ({{ old |stamp }})", "old=latest-durable.json@765cde8"
    ) == (
        "75 (2026-11-27 on 6b9c3f4, 2-core AMD EPYC, Python 3.11.7"
        " (`bench/results/latest-durable.json` as committed in 765cde8))"
    )
    # a file as committed that records no run: the commit's date, said to be git's
    assert rendered(
        "{{ first.functions['WsFunction'].ratio |.2f }} ({{ first |stamp }})",
        "first=latest-coldstart.json@9fc28cc",
    ) == (
        "1.83 (`bench/results/latest-coldstart.json`, committed 2026-11-26 in 9fc28cc, 2-core"
        " AMD EPYC, Python 3.11.7 (the file records no run date or commit; these are git log's,"
        " recorded in `bench/results/stamps.json`))"
    )
    assert (
        rendered("{{ e72(518) |,.0f }} ({{ e72 |when }})", "e72=unrecorded:e72eee1:2026-11-26")
        == "518 (2026-11-26 on e72eee1)"
    )
    for bad, why in (
        ("{{ v0.workloads['append-b1'].records_per_s }}", "needs a format"),
        ("{{ v0.workloads['nope'].records_per_s |.0f }}", "0 list items named 'nope'"),
        ("{{ v0.workloads['append-b1'] |.0f }}", "is not a figure"),
        ("{{ v0(1) |.0f }}", "unrecorded runs only"),
    ):
        page = _page(tmp_path, f"<!-- figures\n{bad} {{{{ v0 |when }}}}\n-->\n<!-- /figures -->\n")
        assert any(why in p for p in _problems(page)), (bad, _problems(page))


def _needs_full_history() -> None:
    try:
        r = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
    except OSError:
        pytest.skip("needs git")
    if r.returncode != 0 or r.stdout.strip() != "false":
        pytest.skip("needs the repository's full history")


def test_a_revision_is_read_from_its_archive_copy_and_fails_without_it(tmp_path: Path) -> None:
    # GIVEN a page that quotes latest-v0.json as committed in d6fe7ba, which no page archived
    page = _page(
        tmp_path,
        "<!-- figures old=latest-v0.json@d6fe7ba\n{{ old |stamp }}\n-->\n<!-- /figures -->\n",
    )
    # THEN the check says which copy is missing and how to make it
    [problem] = _problems(page)
    assert "bench/results/archive/latest-v0@d6fe7ba.json is missing" in problem
    assert "python -m bench.figures --archive" in problem
    # a revision is a commit's hash, which names its archive copy for good
    page.write_text(page.read_text().replace("@d6fe7ba", "@HEAD~1"))
    [problem] = _problems(page)
    assert "a revision is a commit's hash" in problem


def test_an_archive_copy_no_page_quotes_fails_the_check(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    assert figures.check(results=results).problems == []
    (results / "archive" / "latest-v0@d6fe7ba.json").write_text("{}")
    [problem] = figures.check(results=results).problems
    assert "latest-v0@d6fe7ba.json: no page quotes it" in problem


def test_archive_copies_are_the_files_as_committed(tmp_path: Path) -> None:
    """--archive makes, from git, exactly the copies in bench/results/archive/: every file as
    committed at a revision the pages quote, byte for byte, and nothing else."""
    _needs_full_history()
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    shutil.rmtree(results / "archive")
    report = figures.check(results=results, from_git=True)
    assert report.problems == []
    made = sorted(p.name for p in (results / "archive").iterdir())
    kept = sorted(p.name for p in (figures.RESULTS / "archive").iterdir())
    assert made == kept
    assert len(report.made) == len(kept) > 0
    for name in kept:
        assert (results / "archive" / name).read_bytes() == (
            figures.RESULTS / "archive" / name
        ).read_bytes(), name


def test_results_files_without_a_run_date_carry_their_git_log_date(tmp_path: Path) -> None:
    """bench/results/stamps.json holds, for the files the pages quote that record no run date
    or commit, git log's date and commit of the commit that wrote them as they are (for a
    file @rev, rev's): --archive writes the same from git."""
    _needs_full_history()
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    (results / figures.STAMPS).unlink()
    report = figures.check(results=results, from_git=True)
    assert report.problems == []
    kept = json.loads((figures.RESULTS / figures.STAMPS).read_text())
    assert json.loads((results / figures.STAMPS).read_text()) == kept
    assert kept["latest-costs.json"]["source"] == "git log"
    for key, stamp in kept.items():
        file, _, rev = key.partition("@")
        log = subprocess.run(
            [
                "git",
                "log",
                "-1",
                "--format=%h %cs",
                *([rev] if rev else ["--", f"bench/results/{file}"]),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert log == [stamp["commit"], stamp["date"]], key


def test_a_file_that_records_no_run_needs_its_stamp(tmp_path: Path) -> None:
    # GIVEN a copy of bench/results whose stamps.json lost the stamp of latest-costs.json
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    stamps = json.loads((results / figures.STAMPS).read_text())
    kept = stamps.pop("latest-costs.json")
    (results / figures.STAMPS).write_text(json.dumps(stamps))
    problems = figures.check([REPO / "docs" / "costs.md"], results=results).problems
    assert any(
        "latest-costs.json records no run date or commit" in p and "has no stamp for it" in p
        for p in problems
    ), problems
    # a stamp dates the bytes it was taken of: latest-costs.json changed, its stamp is stale
    stamps["latest-costs.json"] = kept
    (results / figures.STAMPS).write_text(json.dumps(stamps))
    assert figures.check([REPO / "docs" / "costs.md"], results=results).problems == []
    costs = results / "latest-costs.json"
    costs.write_text(costs.read_text() + "\n")
    problems = figures.check([REPO / "docs" / "costs.md"], results=results).problems
    assert any("latest-costs.json" in p and "dates other bytes of it" in p for p in problems)


def test_a_stamp_no_page_uses_fails_the_check(tmp_path: Path) -> None:
    # GIVEN a stamp for latest-v0.json, which records its own run: no page uses the stamp
    results = tmp_path / "results"
    shutil.copytree(figures.RESULTS, results)
    stamps = json.loads((results / figures.STAMPS).read_text())
    stamps["latest-v0.json"] = stamps["latest-costs.json"]
    (results / figures.STAMPS).write_text(json.dumps(stamps))
    [problem] = figures.check(results=results).problems
    assert "stamps.json: latest-v0.json: no page quotes it, or it records its run now" in problem


def test_a_region_must_be_closed_on_lines_of_its_own(tmp_path: Path) -> None:
    template = "<!-- figures\n{{ v0 |when }}\n-->\n{close}\nAnd then some prose.\n"
    closed = _page(tmp_path, template.format(close="<!-- /figures -->"), "closed.md")
    [problem] = _problems(closed)  # its body is empty: not what the template renders
    assert "not what its template renders" in problem
    glued = _page(tmp_path, template.format(close="<!-- /figures --> And"), "glued.md")
    [problem] = _problems(glued)
    assert "figures region not closed" in problem
