"""comm_features, the table tagging rules are written against: built by features.sql from comm_ops and the
vocabulary (main_threads, backward_passes); its columns are defined once, in traceparse/store/schema.py (FEATURES)."""

from traceparse.store.query import sql_file
from traceparse.store.schema import features_comments


def build_features(con):
    con.execute(sql_file("traceparse.vocabulary", "world.sql"))
    con.execute(sql_file("traceparse.vocabulary", "host_ops.sql"))
    con.execute(sql_file(__package__, "features.sql"))
    con.execute(features_comments())
