"""Interval arithmetic in SQL, written once.

``union_sql`` turns a query with columns (keys..., start_ns, end_ns) into one
giving, per key, the length of the union of its intervals: nested or
overlapping events count once.
"""


def union_sql(source: str, keys: list[str]) -> str:
    k = ", ".join(keys)
    return f"""
    WITH src AS ({source}),
    o AS (
        SELECT {k}, start_ns, end_ns,
               max(end_ns) OVER (PARTITION BY {k} ORDER BY start_ns, end_ns
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM src
    ),
    g AS (
        SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY {k} ORDER BY start_ns, end_ns) AS piece
        FROM o
    ),
    pieces AS (SELECT {k}, piece, min(start_ns) AS s, max(end_ns) AS e FROM g GROUP BY {k}, piece)
    SELECT {k}, sum(e - s)::BIGINT AS union_ns, count(*) AS pieces FROM pieces GROUP BY {k}
    """
