"""The vocabulary: the basic facts of a trace, each defined once, as tables of the store (their columns:
traceparse/store/schema.py VOCABULARY; `traceparse schema`). One SQL file per concept, run in order:

Per rank (``UNTAGGED``: they need no tags and no other rank; run in the task that parsed the rank,
per_rank.py, and copied into the store; tagging and layout inference select from them):
  main_threads.sql    main_threads: the thread that runs the training loop
  step_windows.sql    step_windows: the windows of every per-step number
  phases.sql          backward_passes: the forward/backward passes of each step (the forward-compute op list
                      lives here), and the internal pass_events
  pipeline_marks.sql  pipeline_marks: the pipeline-schedule annotations, parsed once
  (and, after derive.sql, interval_geometry.sql: each interval placed in its window, before the tags;
  op_self_times.sql: op_self_times, the compute floor's per-rank part; per_rank.py lists the order)
Made by each reader, as a TEMP view of its connection:
  world.sql           world: the job's size (stated, loaded, world_size), one row
Across ranks, before tagging (``CROSS_RANK``, ``build_cross_rank``: run on the copied per-rank tables):
  complete_steps.sql  incomplete_steps: the steps a rank cut short did not finish, left out of step_windows for
                      every rank (a complete step is defined there, once)
After tagging and layout inference (``build_tagged``: they carry each operation's strategy):
  intervals.sql       comm_intervals, compute_intervals
  window_totals.sql   window_totals
  arrivals.sql        collective_arrivals
  strategy_comm.sql   window_strategy_comm
  load_checks.sql     load_issues for impossible values set aside in a relation between events (a GPU activity
                      that starts before its launch)

traceparse/load/build.py runs ``build_cross_rank`` and ``build_tagged`` inside the store's one build transaction.
Each file declares what it reads (``-- reads:``); the order within each group is derived from those declarations
(``modules.order``: a module after the modules defining what it reads).
"""

from traceparse.store.query import sql_file
from traceparse.vocabulary.modules import order

UNTAGGED = tuple(order(("main_threads.sql", "step_windows.sql", "phases.sql", "pipeline_marks.sql")))
CROSS_RANK = ("complete_steps.sql",)
TAGGED = tuple(order(("intervals.sql", "window_totals.sql", "arrivals.sql", "strategy_comm.sql", "load_checks.sql")))


def build_cross_rank(con):
    """The concepts that need every rank's per-rank tables but no tags (run before tagging)."""
    for name in CROSS_RANK:
        con.execute(sql_file(__package__, name))


def build_tagged(con):
    """The concepts that need the tags (comm_ops.strategy) and the layout (run last)."""
    for name in TAGGED:
        con.execute(sql_file(__package__, name))
