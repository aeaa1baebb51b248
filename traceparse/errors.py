"""The one error type that reaches the user: bad input, named by file and problem."""

from traceparse.escape import terminal


def shown(text) -> str:
    """``text`` (a file name, a message) as one printable line of valid UTF-8: a file name's undecodable bytes
    (surrogate escapes) as ``\\xNN``, then control and invisible characters as ``escape.terminal`` shows them."""
    s = str(text)
    try:
        raw = s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        raw = s.encode("utf-8", "backslashreplace")
    return terminal(raw.decode("utf-8", "backslashreplace"))


class TraceError(Exception):
    """Input that cannot be loaded. The CLI prints it as one line and exits with 2."""

    def __init__(self, path, problem: str):
        self.path = shown(path) if path is not None else None
        self.problem = shown(problem)
        super().__init__(f"{self.path}: {self.problem}" if self.path else self.problem)

    def __reduce__(self):
        return (TraceError, (self.path, self.problem))
