"""Loading a run: which files (inputs), which rank each is and which window (run_identity, windows), the parse
pool or Ray (run, parse, ray_engine), then the store built stage by stage (build) and cached (run)."""
