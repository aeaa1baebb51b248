"""The parallel layout of a run: inferred from the tagged store (infer), stated with --layout (stated),
declared by the plugin's metadata (declared), and the model facts the checks and whatif share (model_facts)."""
