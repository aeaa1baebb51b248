-- What the traces' declared layout (traceparse/layout/declared.py) reads of a store besides its plugin_metadata rows.
-- TEMP macros of the connection (store.query.define).

-- layout_axis(name): the axis a mesh dimension or group named ``name`` is read as (group_axis, store/macros.sql).
CREATE OR REPLACE TEMP MACRO layout_axis(name) AS TABLE SELECT group_axis(name, NULL) AS axis;
