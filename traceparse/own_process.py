"""What traceparse does only in a process of its own: its command line, and the parse workers that process starts.

pyarrow imports pandas, when it is installed, on its first conversion of a Python object (any ``pa.array`` or
``pa.scalar``: it asks whether the object is a pandas one), which takes 0.2 to 0.3 s. traceparse builds Arrow from
Python lists and numpy only and converts nothing to pandas, so in a process of its own pyarrow is told at that
first question that pandas is missing; pandas itself stays importable (HTA imports it directly). As a library in
someone else's process (a notebook may convert Arrow to pandas) nothing is changed.
"""

import os
import sys

OWN = "TRACEPARSE_OWN_PROCESS"  # set by the command line; inherited by the workers it starts


def claim():
    """This process is traceparse's own (the command line)."""
    os.environ[OWN] = "1"


class _PandasHidden:
    """A finder that says pandas is not installed, while pyarrow first asks."""

    def find_spec(self, name, _path=None, _target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def arrow_without_pandas():
    """In a process of traceparse's own, pyarrow's first question for pandas answered 'not installed' (where pandas
    is not imported already and pyarrow has not asked yet)."""
    if os.environ.get(OWN) != "1" or "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _PandasHidden()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
