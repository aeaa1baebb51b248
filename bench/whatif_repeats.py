"""How well a step-time forecast can be validated at all: the validation pairs run again, several times, back to back.

    python bench/whatif_repeats.py                       # the default pairs, 3 repeats (about 15 minutes on 2 cores)
    python bench/whatif_repeats.py --repeats 5 --only "straggler removed" 1F1B
    python bench/whatif_repeats.py --out DIR             # the generated runs in DIR, kept (and used again)
    python bench/whatif_repeats.py --keep                # keep the temporary folder's runs (it is printed)

Each repeat generates, one after the other, the measured run and the target run of every pair chosen
(``python -m fixtures.generate``: real multi-process gloo jobs), so the two runs of a pair see the same host. Per
pair it prints:

- the forecast's step-time error on each repeat (forecast from repeat i's measured run / repeat i's target run - 1),
  and their median;
- the noise floor: the median, over pairs of repeats i != j, of |target_i / target_j - 1|, what the target run's own
  repeat misses it by. A forecast cannot be validated to better than that: a pair whose error is within it is as
  right as these runs can tell;
- the bundled pair's error (bench/whatif_pairs.py, the committed fixture runs), for comparison;
- each forecast refused, with its reason (a straggler not named on a repeat).

With ``--out DIR`` the runs already in DIR are used again, and DIR is never removed: a kept campaign can be read
again without generating.
"""

import argparse
import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import whatif_pairs  # noqa: E402 -- bench/ is no package

from traceparse.errors import TraceError  # noqa: E402

DEFAULT = ("pipeline: 1F1B m = 8 from m = 4", "pipeline: interleaved v = 2 from 1F1B (8 layers)",
           "data parallel: ZeRO-1 from DDP", "tensor parallel: tp4 from tp2",
           "straggler removed: DDP, rank 2 slow", "straggler removed: dp2 x tp2, rank 1 slow")


def generate(configs: list[str], out: Path) -> None:
    """Each configuration's run into ``out``, but for those already there (a kept campaign run again)."""
    for name in configs:
        if (out / name / "truth.json").is_file():
            continue
        subprocess.run([sys.executable, "-m", "fixtures.generate", "--config", name, "--out", str(out)], cwd=ROOT,
                       check=True, capture_output=True)


def pair_rows(pairs, repeats: int, out: Path) -> list[dict]:
    configs = list(dict.fromkeys(c for p in pairs for c in (p[1], p[4])))
    for r in range(repeats):
        print(f"repeat {r + 1} of {repeats}: generating {len(configs)} runs", file=sys.stderr)
        generate(configs, out / f"rep{r}")
    rows = []
    for name, run, target, given, truth in pairs:
        steps = [whatif_pairs.measured_terms(out / f"rep{r}" / truth)["step_time_ns"] for r in range(repeats)]
        errors, refused = [], []
        for r in range(repeats):
            try:
                got = whatif_pairs.forecast(out / f"rep{r}" / run, target, given)["prediction"]["step_time_ns"]
            except TraceError as e:  # e.g. --without-straggler on a repeat whose straggler is not named
                got = None
                refused.append(f"repeat {r + 1}: {e}")
            errors.append(None if got is None else got / steps[r] - 1)
        floor = statistics.median(abs(a / b - 1) for a, b in itertools.permutations(steps, 2)) if repeats > 1 else None
        rows.append({"pair": name, "errors": errors, "target_steps_ns": steps, "noise_floor": floor,
                     "refused": refused})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", help="pairs whose name contains one of these")
    p.add_argument("--out", type=Path)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    pairs = [q for q in whatif_pairs.PAIRS
             if (any(s in q[0] for s in a.only) if a.only else q[0] in DEFAULT)]
    out = a.out or Path(tempfile.mkdtemp(prefix="whatif-repeats-"))
    if a.keep and not a.out:
        print(f"the runs: {out}", file=sys.stderr)
    try:
        rows = pair_rows(pairs, a.repeats, out)
    finally:
        if not (a.keep or a.out):  # a folder the user named is theirs: what it held, and the runs written there
            shutil.rmtree(out, ignore_errors=True)
    bundled = {r["pair"]: r["step_error"] for r in whatif_pairs.rows(pairs)}
    print("| pair | error per repeat | median | the target's repeats (ms) | noise floor | bundled runs |")
    print("|---|---|---:|---|---:|---:|")
    for r in rows:
        errs = [e for e in r["errors"] if e is not None]
        med = f"{statistics.median(errs):+.0%}" if errs else "?"
        floor = "?" if r["noise_floor"] is None else f"{r['noise_floor']:.0%}"
        b = bundled.get(r["pair"])
        print(f"| {r['pair']} | {', '.join('?' if e is None else f'{e:+.0%}' for e in r['errors'])} | {med} | "
              f"{', '.join(f'{s / 1e6:.1f}' for s in r['target_steps_ns'])} | {floor} | "
              f"{'?' if b is None else f'{b:+.0%}'} |")
    for r in rows:
        for why in r["refused"]:
            print(f"- {r['pair']}, {why}")


if __name__ == "__main__":
    main()
