"""comm_features, the table tagging rules are written against: built by features.sql from comm_ops and the
vocabulary (main_threads, backward_passes); its columns are defined once, in traceparse/store/schema.py (FEATURES)."""

from traceparse.store.query import sql_file
from traceparse.store.schema import features_comments
from traceparse.vocabulary.modules import use


def build_features(con):
    use(con, "world", "host_ops")
    con.execute(sql_file(__package__, "features.sql"))
    con.execute(features_comments())
