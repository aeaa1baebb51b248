"""--fail-on turns check statuses into exit codes for CI gates."""

import json

from click.testing import CliRunner
from conftest import committed_runs

from traceparse.cli import main

RUN = committed_runs("ddp2") / "ddp2"


def test_fail_on_exits_1_exactly_when_a_check_reaches_the_level(tmp_path):
    db = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["analyze", str(RUN), "--db", db, "--format", "json"])
    assert r.exit_code == 0
    statuses = {k: v["status"] for k, v in json.loads(r.output)["checks"].items()}
    for level, bad in (("warn", {"warn", "fail"}), ("fail", {"fail"})):
        r = CliRunner().invoke(main, ["analyze", str(RUN), "--db", db, "--fail-on", level])
        breached = [k for k, s in statuses.items() if s in bad]  # in report order
        assert r.exit_code == (1 if breached else 0)
        if breached:
            assert ", ".join(breached) in r.stderr
