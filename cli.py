"""Run the traceparse command from a checkout: ``python cli.py analyze run/*.json``."""

from traceparse.cli import main

if __name__ == "__main__":
    main()
