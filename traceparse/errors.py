"""The one error type that reaches the user: bad input, named by file and problem."""


class TraceError(Exception):
    """Input that cannot be loaded. The CLI prints it as one line and exits with 2."""

    def __init__(self, path, problem: str):
        self.path = str(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)

    def __reduce__(self):
        return (TraceError, (self.path, self.problem))
