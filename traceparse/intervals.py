"""Interval arithmetic for SQL assembled in Python, on the store's ``interval_pieces`` macro.

``union_sql`` turns a query with columns (keys..., start_ns, end_ns) into one
giving, per key, the length of the union of its intervals: nested or
overlapping events count once.
"""


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def union_sql(source: str, keys: list[str]) -> str:
    key = "{" + ", ".join(f"'{c}': {c}" for c in keys) + "}"
    pieces = f"SELECT {key} AS k, start_ns AS s, end_ns AS e FROM ({source})"
    return f"""
    SELECT unnest(k), sum(e - s)::BIGINT AS union_ns, count(*) AS pieces
    FROM (SELECT k, piece, min(s) AS s, max(e) AS e FROM interval_pieces({_literal(pieces)}, true) GROUP BY k, piece)
    GROUP BY k
    """
