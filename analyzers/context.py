"""What a check receives: the store, the inferred layout, what the user stated, thresholds."""

from dataclasses import dataclass, field

from traceparse.store.query import rows
from traceparse.thresholds import check_thresholds


@dataclass
class Context:
    con: object  # read-only DuckDB connection to the store
    layout: dict  # traceparse.layout.stated.inferred_layout(): values and "evidence"
    stated: dict  # what is given: --layout (degrees, model dims, optimizer) over the traces' plugin metadata
    limits: dict  # this check's table of rules/thresholds.toml
    sources: dict = field(default_factory=dict)  # key -> 'stated' (--layout) or 'metadata'; 'stated' when absent
    path: dict | None = None  # the critical path section (the document's), else found when first read
    shared: dict = field(default_factory=dict)  # what the checks of one document build once: the step graphs

    @property
    def critical_path(self) -> dict:
        """The run's critical path per step (``critical_path_section``): the document's, or found here once."""
        if self.path is None:
            from traceparse.vocabulary.critical_path import critical_path_section

            self.path = critical_path_section(self.step_graphs)
        return self.path

    @property
    def step_graphs(self) -> list:
        """The run's step graphs, one per step every rank has a window for (``step_graph.step_graphs``), built
        once for every check that reads them."""
        from traceparse.vocabulary.step_graph import graphs_once

        return graphs_once(self.con, self.shared)

    def given(self, key) -> str:
        """Where the given value of ``key`` came from: 'stated' or 'metadata'."""
        return self.sources.get(key, "stated")

    @property
    def heavy_over_mean(self) -> float:
        """[stages] heavy_over_mean of rules/thresholds.toml: how many times the stages' mean compute floor a
        pipeline stage needs to be named heavy (bubble.bottleneck_stage, imbalance.heavy_stage: one threshold)."""
        return check_thresholds()["stages"]["heavy_over_mean"]

    def rows(self, sql, params=None) -> list[dict]:
        return rows(self.con, sql, params)
