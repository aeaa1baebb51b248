"""Pure theory, no store access (docs/parallelism.md): pipeline formulas, textbook orders and their replay
(pipeline), communication-volume formulas (comm_volume), the ZeRO memory table (memory). Checks and whatif
both import it."""
