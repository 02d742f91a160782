"""An independent manifest linter agrees (issue 45 §1): kube-score (github.com/zegl/kube-score,
built from the Go module proxy by localcluster/kube-score/build.sh) scores the rendered bundle,
``kubectl kustomize deploy/`` (what install.yaml and the chart's default values render), and
every finding below OK is one that docs/operator-guide.md ("What kube-score reports, and why")
lists with its reason: a new finding fails here until it is fixed or documented, and a
documented one that no longer occurs fails too, so the table stays true."""

import json
import re
import subprocess
from pathlib import Path

import yaml

from localcluster.binaries import _build
from localcluster.helmchart import DEPLOY, REPO_ROOT, kustomize

BUILD_SCRIPT = REPO_ROOT / "localcluster" / "kube-score" / "build.sh"
GUIDE = REPO_ROOT / "docs" / "operator-guide.md"
TABLE_HEADING = "### What kube-score reports, and why"
OK = 10
"""kube-score's grade of a passed check (scorecard.GradeAllOK)."""
GRADES = {1: "CRITICAL", 5: "WARNING", 7: "ALMOST OK"}


def kube_score(bundle: Path) -> list[dict[str, object]]:
    done = subprocess.run(
        [
            str(_build(BUILD_SCRIPT, "kube-score")),
            "score",
            "--output-format",
            "json",
            "--output-version",
            "v2",
            str(bundle),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), f"kube-score failed (exit {done.returncode}): {done.stderr}"
    scored: list[dict[str, object]] = json.loads(done.stdout)
    return scored


def findings(scored: list[dict[str, object]]) -> tuple[set[tuple[str, str, str, str]], int]:
    """((kind, name, check id, grade) of every scored check below OK), number of OK checks."""
    found = set()
    passed = 0
    for obj in scored:
        kind = obj["type_meta"]["kind"]  # type: ignore[index]
        name = obj["object_meta"]["name"]  # type: ignore[index]
        for check in obj["checks"] or []:  # type: ignore[attr-defined]
            if check["skipped"]:
                continue
            if check["grade"] == OK:
                passed += 1
            else:
                found.add((kind, name, check["check"]["id"], GRADES.get(check["grade"], str(check["grade"]))))
    return found, passed


def documented() -> set[tuple[str, str, str, str]]:
    """Rows of the guide's table: | kind/name | check id | grade | reason |, each with a reason."""
    text = GUIDE.read_text()
    section = re.split(r"\n#{2,3} ", text[text.index(TABLE_HEADING) + len(TABLE_HEADING) :], maxsplit=1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"\w+/[\w.-]+", cells[0]):
            continue
        kind, name = cells[0].split("/", 1)
        assert len(cells[3]) > 20, f"{cells[0]} {cells[1]}: no reason given in {GUIDE.name}"
        rows.add((kind, name, cells[1], cells[2]))
    return rows


def test_every_kube_score_finding_on_the_bundle_has_a_documented_reason(tmp_path: Path) -> None:
    bundle = tmp_path / "install.yaml"
    bundle.write_text(yaml.safe_dump_all(kustomize(DEPLOY), sort_keys=False))
    found, passed = findings(kube_score(bundle))
    listed = documented()
    assert found - listed == set(), "findings without a documented reason (fix them or add a row with the reason)"
    assert listed - found == set(), "documented findings that no longer occur (remove their rows)"
    assert passed > 0
