"""Call ``traceparse.analyze(PATHS)`` many times at once (the ``concurrent`` class of tests/mutation):

    python api_driver.py threads N 1 PATHS...     # N threads of this process
    python api_driver.py processes N M PATHS...   # N processes of M threads each

The reference is one call with ``use_cache=False`` first (written to ./reference.json for the
children), then every call runs on the default cache ($TRACEPARSE_CACHE, fresh) released at the same
moment (a barrier; children report ready and wait for a go on stdin). Prints a JSON summary:
``{"calls", "ok", "errors": [...], "mismatches": [...]}``; exit 0 when every call returned the
reference document, 1 otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

REFERENCE = Path("reference.json")


def canon(doc) -> str:
    return json.dumps(doc, sort_keys=True, default=str)


def first_difference(a, b, path="") -> str:
    if type(a) is not type(b):
        return f"{path or '/'}: {str(a)[:60]} != {str(b)[:60]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'the reference' if k in a else 'this call'}"
            if a[k] != b[k]:
                return first_difference(a[k], b[k], f"{path}/{k}")
    if isinstance(a, list) and len(a) == len(b):
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return first_difference(x, y, f"{path}[{k}]")
    return f"{path or '/'}: {str(a)[:60]} != {str(b)[:60]}"


def at_once(paths, n: int, wait=None) -> list[dict]:
    """``n`` threads calling analyze, released together (after ``wait()``, if given)."""
    import traceparse
    import traceparse.document  # noqa: F401 -- imported before the start, not by the racing calls

    ref = REFERENCE.read_text()
    barrier, out = threading.Barrier(n + 1), [None] * n

    def one(k):
        barrier.wait()
        try:
            text = canon(traceparse.analyze(paths))
        except BaseException as e:  # noqa: BLE001 -- reported, not raised
            out[k] = {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
            return
        out[k] = {"ok": True} if text == ref else {"mismatch": first_difference(json.loads(ref), json.loads(text))}

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    if wait:
        wait()
    barrier.wait()
    for t in threads:
        t.join()
    return out


def child(m: int, paths) -> None:
    def wait():
        print("ready", flush=True)
        sys.stdin.readline()

    print(json.dumps(at_once(paths, m, wait)), flush=True)


def main(argv) -> int:
    mode, n, m, paths = argv[0], int(argv[1]), int(argv[2]), argv[3:]
    if mode == "child":
        child(m, paths)
        return 0
    import traceparse

    REFERENCE.write_text(canon(traceparse.analyze(paths, use_cache=False)))
    if mode == "threads":
        results = at_once(paths, n)
    else:
        kids = [subprocess.Popen([sys.executable, __file__, "child", "1", str(m), *paths], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(n)]
        for k in kids:
            k.stdout.readline()  # ready
        for k in kids:
            k.stdin.write("go\n")
            k.stdin.flush()
        results = []
        for k in kids:
            out = k.stdout.read()
            k.wait()
            try:
                results += json.loads(out)
            except ValueError:
                results += [{"error": f"a child exited {k.returncode} without results: {out[:200]!r}"}] * m
    summary = {"calls": n * m, "ok": sum(1 for r in results if r and r.get("ok")),
               "errors": [r["error"] for r in results if r and "error" in r],
               "mismatches": [r["mismatch"] for r in results if r and "mismatch" in r]}
    print(json.dumps(summary))
    return 0 if summary["ok"] == summary["calls"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
