"""Communication kernel rules (rules/comm_kernels): the rule files, their validation,
`traceparse explain`, and their examples run through the loader."""

import re

import pytest
from click.testing import CliRunner
from traces import load, rows, trace, write, x

from traceparse.tagging import comm_kernels
from traceparse.cli import main
from traceparse.tagging.comm_kernels import OPS, load_rules, matches, validate
from traceparse.tagging.rules import load_rules as load_tag_rules

RULES = load_rules()


def test_kernel_rule_files_are_valid():
    assert validate() == []


def test_rules_validate_command_counts_both_kinds():
    r = CliRunner().invoke(main, ["rules", "validate"])
    assert r.exit_code == 0, r.output
    assert f"{len(load_tag_rules())} rule files valid in rules/tags" in r.output
    n = len(RULES)
    assert f"{n} rule {'file' if n == 1 else 'files'} valid in rules/comm_kernels" in r.output


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_kernel_rule_examples(rule):
    con = comm_kernels._connect()
    for name in rule.must_match:
        assert matches(con, rule.pattern, name), name
    for name in rule.must_not_match:
        assert not matches(con, rule.pattern, name), name
    assert rule.id == rule.file.removesuffix(".toml")
    assert rule.kind == "comm_kernel" and rule.op in OPS
    assert "docs/parallelism.md" in rule.why


def test_ids_unique_across_tag_and_kernel_rules():
    ids = [r.id for r in load_tag_rules()] + [r.id for r in RULES]
    assert len(ids) == len(set(ids))


def test_explain_prints_a_kernel_rule():
    rule = next(r for r in RULES if r.id == "deepep_dispatch_combine")
    r = CliRunner().invoke(main, ["explain", "deepep_dispatch_combine"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"deepep_dispatch_combine: {rule.title}\n")
    for line in (f"op: {rule.op}", f"pattern: {rule.pattern}", f"why: {rule.why}"):
        assert f"\n  {line}\n" in r.output
    for name in rule.must_match:
        assert f"\n  matches: {name}\n" in r.output
    for name in rule.must_not_match:
        assert f"\n  does not match: {name}\n" in r.output


def test_explain_lists_kernel_rules():
    r = CliRunner().invoke(main, ["explain", "no_such_rule"])
    assert r.exit_code == 2 and "traceparse explain --list" in r.output
    listed = CliRunner().invoke(main, ["explain", "--list"])
    assert listed.exit_code == 0 and "deepep_dispatch_combine" in listed.output
    assert "did you mean: deepep_dispatch_combine?" in CliRunner().invoke(main, ["explain", "deepep_dispatch"]).output


# --- a broken rule in a folder of its own -------------------------------------------

GOOD = {  # key -> TOML value
    "id": '"myep_kernels"',
    "title": '"Test kernels"',
    "kind": '"comm_kernel"',
    "op": '"all_to_all"',
    "pattern": r"'myep::(dispatch|combine)\b'",
    "why": '"docs/parallelism.md 3.5: tokens go to their experts and back."',
    "must_match": '["void myep::dispatch<8>(int*)"]',
    "must_not_match": '["void myep::dispatch_layout<8>(int*)"]',
}
LOOKAHEAD = "myep::(?=dispatch)"  # valid for Python's re, not for RE2


def rule_folder(tmp_path, name="myep_kernels", **changes):
    """A folder holding one rule file: GOOD with ``changes`` (None removes a key)."""
    fields = {k: v for k, v in (GOOD | changes).items() if v is not None}
    (tmp_path / f"{name}.toml").write_text("".join(f"{k} = {v}\n" for k, v in fields.items()))
    return tmp_path


def test_a_good_rule_in_a_folder_passes(tmp_path):
    assert validate(rule_folder(tmp_path)) == []


BROKEN = {  # case: (changes to GOOD, the problem reported)
    "missing key": ({"kind": None}, "missing kind"),
    "unknown key": ({"priority": "3"}, "unknown keys priority"),
    "id not the file name": ({"id": '"other_name"'}, "id 'other_name' differs from the file name"),
    "kind": ({"kind": '"tag"'}, "kind 'tag' is not 'comm_kernel'"),
    "op not normalized": ({"op": '"alltoall"'}, "op 'alltoall' is not one of all_reduce, "),
    "why cites nothing": ({"why": '"EP moves tokens."'}, "why must cite a section of docs/parallelism.md"),
    "no must_not_match": ({"must_not_match": "[]"}, "must be non-empty lists of kernel names"),
    "not RE2": ({"pattern": f"'{LOOKAHEAD}'"},
                "pattern is not a valid RE2 expression for DuckDB's regexp_matches "
                "(Invalid Input Error: invalid perl operator: (?="),
    "matches every name": ({"pattern": "'(myep::dispatch)?'"},
                           "pattern matches an empty name, so it would take every kernel"),
    "must_match fails": ({"must_match": '["void myep::combine_x()"]'},
                         "must_match[0] does not match: void myep::combine_x()"),
    "must_not_match matches": ({"must_not_match": '["void myep::combine<2>()"]'},
                               "must_not_match[0] matches: void myep::combine<2>()"),
    # the loader hands NCCL kernels to no kernel rule: this example can never be a custom kernel
    "NCCL example": ({"pattern": r"'(myep|nccl)::(dispatch|combine)\b'", "must_match": '["nccl::dispatch()"]'},
                     "must_match[0] does not match (an NCCL/RCCL kernel: the loader never hands those "
                     "to kernel rules): nccl::dispatch()"),
}


@pytest.mark.parametrize("changes, problem", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_rule_fails_validation(tmp_path, changes, problem):
    problems = validate(rule_folder(tmp_path, **changes))
    assert any(p.startswith("comm_kernels/myep_kernels.toml: ") and problem in p for p in problems), problems


def test_python_re_alone_would_accept_the_lookahead():
    assert re.compile(LOOKAHEAD)  # why patterns are compiled by DuckDB: RE2 refuses it


def test_a_file_that_is_not_toml_fails_validation(tmp_path):
    (tmp_path / "myep_kernels.toml").write_text("id = [\n")
    problems = validate(tmp_path)
    assert len(problems) == 1 and problems[0].startswith("comm_kernels/myep_kernels.toml: not TOML")


def test_id_of_a_tag_rule_is_refused(tmp_path):
    problems = validate(rule_folder(tmp_path, name="p2p_chain", id='"p2p_chain"'))
    assert problems == ["comm_kernels/p2p_chain.toml: id 'p2p_chain' also used by the tag rule tags/p2p_chain.toml"]


def test_rules_validate_command_fails_on_a_broken_kernel_rule(tmp_path, monkeypatch):
    folder = rule_folder(tmp_path, op='"shuffle"')
    monkeypatch.setattr(comm_kernels, "rule_folder", lambda: folder)
    r = CliRunner().invoke(main, ["rules", "validate"])
    assert r.exit_code == 2
    assert "traceparse: rule error: comm_kernels/myep_kernels.toml: op 'shuffle' is not one of" in r.output
    assert "valid in" not in r.output


# --- the examples through the loader ----------------------------------------------------

@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_loader_takes_exactly_the_must_match_kernels(rule, tmp_path):
    names = list(rule.must_match) + list(rule.must_not_match)
    evs = [x(name, 100 + 10 * i, 5, cat="kernel", pid=0, tid=7, stream=7, device=0) for i, name in enumerate(names)]
    con = load(write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=2)), tmp_path / "s.duckdb")
    got = rows(con, "SELECT name, op FROM comm_ops WHERE source = 'custom_kernel' ORDER BY exec_ts_ns")
    assert got == [{"name": n, "op": rule.op} for n in rule.must_match]
