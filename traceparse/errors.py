"""The one error type that reaches the user: bad input, named by file and problem."""


def shown(text) -> str:
    """``text`` (a file name, a message) as one printable line of valid UTF-8: a file name's undecodable bytes
    (surrogate escapes) as ``\\xNN``, control characters (a newline in a name) as escapes."""
    s = str(text)
    try:
        raw = s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        raw = s.encode("utf-8", "backslashreplace")
    s = raw.decode("utf-8", "backslashreplace")
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


class TraceError(Exception):
    """Input that cannot be loaded. The CLI prints it as one line and exits with 2."""

    def __init__(self, path, problem: str):
        self.path = shown(path) if path is not None else None
        self.problem = shown(problem)
        super().__init__(f"{self.path}: {self.problem}" if self.path else self.problem)

    def __reduce__(self):
        return (TraceError, (self.path, self.problem))
