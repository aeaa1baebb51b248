"""traceparse layout --layout: what you state that the trace contradicts is an exit 1 with one line naming each key
(ddp2 is a 2-rank DDP run: dp = 2 by its configuration, fixtures/runs/ddp2/truth.json)."""

import json

from click.testing import CliRunner

from conftest import FIXTURE_RUNS

from traceparse.cli import main

RUN = FIXTURE_RUNS / "ddp2"


def layout(*stated):
    return CliRunner().invoke(main, ["layout", str(RUN), "--layout", *stated])


def test_what_the_trace_agrees_with_exits_0(isolated_dirs):  # noqa: ARG001
    assert json.loads((RUN / "truth.json").read_text())["layout"]["dp"] == 2
    assert layout("dp=2").exit_code == 0


def test_what_the_trace_contradicts_exits_1_naming_it(isolated_dirs):  # noqa: ARG001
    r = layout("dp=4,tp=1")
    assert r.exit_code == 1
    said = [line for line in r.output.splitlines() if line.startswith("traceparse: --layout contradicts")]
    assert said == ["traceparse: --layout contradicts the trace: dp = 4 (inferred 2)"]
