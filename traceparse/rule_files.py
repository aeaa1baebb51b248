"""What every rule file (rules/tags, rules/comm_kernels) must satisfy, checked once for both kinds."""

import tomllib

CITATION = "docs/parallelism.md"


def read_rule(entry, name: str, required: tuple, seen: dict) -> tuple[dict | None, list[str]]:
    """(the rule's data, or None when it cannot be checked further; problems as 'name: problem' lines).

    The file is TOML with exactly the ``required`` keys, its ``id`` is its file name and unused in
    ``seen`` (id -> the file that has it; updated), and its ``why`` cites a section of the reference.
    """
    try:
        data = tomllib.loads(entry.read_text())
    except tomllib.TOMLDecodeError as e:
        return None, [f"{name}: not TOML ({e})"]
    missing = [k for k in required if k not in data]
    if missing:
        return None, [f"{name}: missing {', '.join(missing)}"]
    problems = []
    unknown = set(data) - set(required)
    if unknown:
        problems.append(f"{name}: unknown keys {', '.join(sorted(unknown))}")
    rid = data["id"]
    if rid != entry.name.removesuffix(".toml"):
        problems.append(f"{name}: id {rid!r} differs from the file name")
    if rid in seen:
        problems.append(f"{name}: id {rid!r} also used by {seen[rid]}")
    seen.setdefault(rid, name)
    if not isinstance(data["why"], str) or CITATION not in data["why"]:
        problems.append(f"{name}: why must cite a section of {CITATION}")
    return data, problems
