"""Mutation campaign: seeded damage to real traces and to the command line, each case run as a
subprocess of the ``traceparse`` CLI and judged against the loading promise (docs/reliability.md).

- ``bases``: the small real inputs (fixture rank files, public traces, a hand-made trace) and a scanner
  that finds the byte span of every event and field in their JSON text;
- ``generate``: the case classes and their mutation operators (``generate_cases(n, seed)``);
- ``surfaces``: the classes of the newer surfaces (-o targets, histories, arguments, the API at once) and
  their checks; ``api_driver``: the script the ``concurrent`` cases run;
- ``dumps``: the ``dump`` class, hostile Flight Recorder dumps for ``hang`` made from ``fixtures/hangs`` (its
  builders are also ``tests/test_hang_hostile.py``'s);
- ``hostile``: hostile stores (``store``), control characters and Markdown in names (``control_chars``,
  ``markdown``), huge metadata and option numbers (``huge_numbers``), odd characters in paths (``path_chars``), and
  their checks;
- ``run``: runs one case in its own folders, session and limits, and collects what happened;
- ``checks``: decides the outcome (ok, crash, traceback, silent loss, ...);
- ``campaign``: runs many cases (controls first), counts outcomes and keeps examples.
"""
