"""Apply the tagging rules to comm_ops, then settle variants that depend on the whole group.

A rule tags an operation with a strategy and a provisional variant. Two variants
are properties of a group's whole pattern, not of one operation, and are set
afterwards (docs/parallelism.md 3.1, 3.3):
- DP: the ZeRO stage of the group, from which collectives it runs where:
  parameters all-gathered again in backward -> zero3; gradients reduce-scattered
  (parameters all-gathered only in forward) -> zero2; gradients all-reduced and
  parameters broadcast or all-gathered by the optimizer -> zero1; gradients
  all-reduced only -> zero0. "In backward" is the phase of comm_features: inside
  one forward/backward pass's backward, between its first and last autograd frame.
  With gradient accumulation a step runs m passes and FSDP2 reshards after every
  backward, so ZeRO-2 gathers again before each micro-batch's forward: those gathers
  lie between two passes, in forward, and do not make the group zero3; ZeRO-3
  re-gathers inside each pass's backward.
- TP: megatron_sp when the group reduce-scatters or all-gathers activations
  (Megatron sequence parallelism), else megatron; NULL (unknown) when the
  operation's group is unknown, since the variant is its group's pattern.

No rule tags a collective of one rank (LONE: its group has one rank, or its world
does): it exchanges nothing with another rank, so it serves no strategy
(docs/parallelism.md 2: a collective combines or moves the buffers of its
group's members; 1: a degree of one is no parallelism).
"""

from traceparse.store.query import rows
from traceparse.tagging.features import build_features
from traceparse.tagging.rules import load_rules

# a comm_features row of one rank: its group, or its whole world, has one rank
LONE = "(coalesce(len(group_ranks), group_size) = 1 OR world_size = 1)"

# why an operation stayed untagged, first that holds
UNTAGGED_WHY = (
    (LONE, "a collective of one rank (its group or its world has one rank): it exchanges nothing with another "
           "rank, so it serves no strategy"),
    ("group_key IS NULL", "its process group is unknown (the trace names none) and nothing in the operation alone "
                          "decides: the rules that tell strategies apart by a group's whole pattern cannot"),
    ("true", "no tagging rule matched"),
)


def tag_comm_ops(con):
    build_features(con)
    rules = load_rules()
    if rules:  # each operation gets the first rule, in priority order, whose condition holds: one statement
        first = " ".join(f"WHEN coalesce(({r.when}), false) THEN {i}" for i, r in enumerate(rules))
        values = ", ".join("(?::INTEGER, ?::VARCHAR, ?::VARCHAR, ?::VARCHAR, ?::DOUBLE)" for _ in rules)
        con.execute(
            f"""UPDATE comm_ops c SET strategy = r.strategy, variant = r.variant, rule_id = r.id,
                                      confidence = r.confidence
                FROM (SELECT rank, op_id, CASE {first} END AS i FROM comm_features
                      WHERE NOT coalesce({LONE}, false)) m
                JOIN (VALUES {values}) r(i, strategy, variant, id, confidence) USING (i)
                WHERE m.rank = c.rank AND m.op_id = c.op_id AND c.strategy IS NULL""",
            [v for i, r in enumerate(rules) for v in (i, r.strategy, r.variant, r.id, r.confidence)],
        )
    con.execute(
        """
        UPDATE comm_ops c SET variant = z.variant
        FROM (
            SELECT f.group_key,
                   CASE WHEN bool_or(f.op = 'all_gather' AND f.phase = 'backward') THEN 'zero3'
                        WHEN bool_or(f.op = 'reduce_scatter') THEN 'zero2'
                        WHEN bool_or(f.op IN ('broadcast', 'all_gather') AND f.phase = 'optimizer') THEN 'zero1'
                        ELSE 'zero0' END AS variant
            FROM comm_features f JOIN comm_ops o ON o.rank = f.rank AND o.op_id = f.op_id
            WHERE o.strategy = 'dp' GROUP BY f.group_key
        ) z, comm_features f
        WHERE c.strategy = 'dp' AND f.rank = c.rank AND f.op_id = c.op_id
          AND f.group_key IS NOT DISTINCT FROM z.group_key
        """
    )
    con.execute(
        """
        UPDATE comm_ops c SET variant = 'megatron_sp'
        FROM comm_features f
        WHERE c.strategy = 'tp' AND f.rank = c.rank AND f.op_id = c.op_id
          AND f.group_key IN (SELECT f2.group_key FROM comm_features f2 JOIN comm_ops o
                                ON o.rank = f2.rank AND o.op_id = f2.op_id
                              WHERE o.strategy = 'tp' AND o.op IN ('reduce_scatter', 'all_gather')
                                AND f2.phase IN ('forward', 'backward'))
        """
    )
    con.execute(
        """
        UPDATE comm_ops c SET variant = NULL
        FROM comm_features f
        WHERE c.strategy = 'tp' AND f.rank = c.rank AND f.op_id = c.op_id AND f.group_key IS NULL
        """
    )


def untagged_why(con) -> list[dict]:
    """[{why, ops, time_ns}]: the untagged operations by why no rule tagged them (UNTAGGED_WHY), costliest first."""
    case = " ".join(f"WHEN coalesce({cond}, false) THEN ?" for cond, _ in UNTAGGED_WHY)
    return rows(
        con,
        f"""SELECT CASE {case} END AS why, count(*) AS ops, sum(c.dur_ns)::BIGINT AS time_ns
            FROM comm_features f
            JOIN (SELECT rank, op_id, coalesce(exec_dur_ns, host_dur_ns, 0) AS dur_ns FROM comm_ops
                  WHERE strategy IS NULL) c USING (rank, op_id)
            GROUP BY 1 ORDER BY time_ns DESC, why""",
        [why for _, why in UNTAGGED_WHY],
    )
