"""Where the values of one JSON level end, followed exactly and fed piece by piece.

The fast path (split.py) guesses event boundaries and lets msgspec check the guess. When a guess
fails, or a stretch of text has no boundary to guess, this scanner takes over: it follows strings
(escapes included), brackets and separators, so a ``},{`` inside a name is not a boundary and a
bad value inside one event cannot hide the boundaries of the others. It is resumable (each byte
is looked at once, whatever the layout) and keeps only the current value's text, with runs of
whitespace outside strings squeezed to one space, so gigabytes of whitespace hold no memory. A
value larger than ``max_value`` bytes stops the scan (ValueTooLarge).

Regular expressions do the byte-level work in C: only brackets, strings, separators and long
whitespace runs cost a step in Python.
"""

import re

# the tokens: a level's separators, brackets and a string's opening quote; inside a value separators
# need no step (single character classes: the regex engine skips other bytes at C speed)
_TOP = re.compile(rb'[\[\]{},:"]')
_INNER = re.compile(rb'[\[\]{}"]')
_OPENERS = re.compile(rb"[\[{]+")
_CLOSERS = re.compile(rb"[\]}]+")
# a stretch of more than this many bytes between tokens has its whitespace runs squeezed to one space
_SQUEEZE = 4096
_WS_RUN = re.compile(rb"[ \t\n\r]{2,}")
_WS = (b" ", b"\t", b"\n", b"\r")
# the rest of a string up to its closing quote (or the end of the data)
_STRING_REST = re.compile(rb'(?:[^"\\]++|\\[\s\S])*+')
_NONBLANK = re.compile(rb"[^ \t\n\r]")
_OPEN = frozenset(b"[{")


def _squeeze(text: bytes) -> bytes:
    """``text`` (outside strings) with each run of JSON whitespace made one space."""
    if b"\x0b" in text or b"\x0c" in text:  # bytes.split() would take these for whitespace too
        return _WS_RUN.sub(b" ", text)
    words = text.split()
    out = b" ".join(words)
    if text[:1] in _WS:
        out = b" " + out
    if words and text[-1:] in _WS:
        out += b" "
    return out


class ValueTooLarge(Exception):
    """A value of the scanned level is larger than the scanner's ``max_value``."""

    def __init__(self, offset: int, size: int):
        self.offset = offset
        self.size = size
        super().__init__(f"a value at byte {offset} is larger than {size} bytes")


class Value:
    """One complete value of the level: its text (whitespace runs squeezed), the offset of its first
    level ':' in the text (a member's key/value split; -1 when none) and the offset in the stream
    where it started."""

    __slots__ = ("text", "colon", "offset")

    def __init__(self, text: bytes, colon: int, offset: int):
        self.text = text
        self.colon = colon
        self.offset = offset


class Scanner:
    """Splits the body of a JSON array or object (after its opening bracket) into its values.

    ``feed(data, pos, stop)`` scans ``data[pos:]`` and returns where it stopped: at the end of the
    data, just after the level's closing bracket (``closed``), or just after the first separating
    comma at or after ``stop`` or the one that completes ``max_values`` values (the scanner is then
    between two values and the caller may go on with the rest of ``data`` some other way).
    Complete values are appended to ``values``; blank values (``[a,,b]``, ``[a,]``) are counted in
    ``extra_commas``. ``events_key``: stop at the opening bracket of a member ``"traceEvents": [``
    (``found_events``) instead of scanning it.
    """

    def __init__(self, max_value: int, offset: int = 0, after_comma: bool = False, events_key: bool = False,
                 max_values: int = 1 << 62):
        self.max_value = max_value
        self.max_values = max_values
        self.offset = offset  # stream offset of data[pos] at the next feed
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.cur: bytearray | None = None  # text of the value in progress from earlier feeds or squeezed runs
        self.colon = -1
        self.blank = True
        self.start = offset  # stream offset where the value in progress began
        self.after_comma = after_comma
        self.values: list[Value] = []
        self.extra_commas = 0
        self.closed = False
        self.events_key = events_key
        self.key_is_events = False
        self.found_events = False

    # -- the value in progress ---------------------------------------------------------------

    def partial(self) -> bytes:
        """Text of the value in progress kept from earlier feeds (a cut-off file's last value)."""
        return bytes(self.cur or b"")

    def in_value(self) -> bool:
        """Whether a value has begun and not ended (after the last feed)."""
        return not (self.blank and not self.in_string and self.depth == 0)

    def _size(self) -> int:
        return len(self.cur) if self.cur is not None else 0

    def _add(self, data, a: int, b: int, extra: bytes = b""):
        """Keep data[a:b] (and ``extra``) as part of the value in progress."""
        if b > a or extra:
            if self.blank and (_NONBLANK.search(data, a, b) or _NONBLANK.search(extra)):
                self.blank = False
            if self.cur is None:
                self.cur = bytearray()
            self.cur += memoryview(data)[a:b]
            self.cur += extra
            if len(self.cur) > self.max_value:
                raise ValueTooLarge(self.start, self.max_value)

    def _end_value(self, data, a: int, b: int, comma: bool, at: int):
        """The value in progress ends with data[a:b] (at a comma, or at the level's closing bracket)."""
        if self.cur is None:
            text = data[a:b]
            blank = self.blank and not _NONBLANK.search(data, a, b)
        else:
            self._add(data, a, b)
            text, blank = self.cur, self.blank
        if b - a > self.max_value:
            raise ValueTooLarge(self.start, self.max_value)
        if not blank:
            self.values.append(Value(text, self.colon, self.start))
        elif comma or self.after_comma:
            self.extra_commas += 1
        self.cur = None
        self.colon = -1
        self.blank = True
        self.after_comma = comma
        self.key_is_events = False
        self.start = at

    # -- the scan -------------------------------------------------------------------------------

    def feed(self, data: bytes, pos: int = 0, stop: int | None = None) -> int:
        base = self.offset - pos  # stream offset of data[0]
        end = self._scan(data, pos, stop, base)
        self.offset = base + end
        return end

    def _scan(self, data, pos, stop, base) -> int:
        n = len(data)
        seg = pos  # data[seg:] is not yet copied into the value in progress
        gap = pos  # start of the text since the last token (outside strings)
        top_search = _TOP.search
        inner_search = _INNER.search
        string_rest = _STRING_REST.match
        while True:
            if self.in_string:
                if self.escape:
                    if pos >= n:
                        break
                    pos += 1
                    self.escape = False
                e = string_rest(data, pos).end()
                if e >= n:
                    pos = n
                    break
                if data[e] == 0x22:
                    gap = pos = e + 1
                    self.in_string = False
                    continue
                self.escape = True  # a backslash is the last byte: the escaped byte comes next
                pos = n
                break
            depth = self.depth
            m = (top_search if depth == 0 else inner_search)(data, pos)
            s = m.start() if m is not None else n
            if s - gap > _SQUEEZE:  # a long stretch with no token: squeeze its whitespace runs
                self._add(data, seg, gap, _squeeze(data[gap:s]))
                seg = s
            if m is None:
                pos = n
                break
            c = data[s]
            if c == 0x22:  # '"'
                self.in_string = True
                pos = s + 1
                continue
            if c == 0x5B or c == 0x7B:  # '[' '{'
                if depth == 0 and self.key_is_events and c == 0x5B and self._only_blank_since_colon(data, seg, s):
                    self._add(data, seg, s)
                    self.found_events = True
                    return s + 1
                e = _OPENERS.match(data, s).end()
                self.depth = depth + (e - s)
                gap = pos = e
            elif c == 0x5D or c == 0x7D:  # ']' '}'
                e = _CLOSERS.match(data, s, s + depth + 1).end()
                if e - s <= depth:
                    self.depth = depth - (e - s)
                    gap = pos = e
                else:  # the closer at s + depth closes the level
                    close = s + depth
                    self.depth = 0
                    self._end_value(data, seg, close, False, base + close + 1)
                    self.closed = True
                    return close + 1
            elif c == 0x2C:  # ',' at the level
                self._end_value(data, seg, s, True, base + s + 1)
                seg = gap = pos = s + 1
                if (stop is not None and s >= stop) or len(self.values) >= self.max_values:
                    return pos
            else:  # ':' at the level
                if self.colon < 0:
                    self.colon = self._size() + (s - seg)
                    if self.events_key and self.colon < 64:
                        key = (self.partial() + data[seg:s]).strip()
                        self.key_is_events = key == b'"traceEvents"'
                gap = pos = s + 1
        self._add(data, seg, n)
        return n

    def _only_blank_since_colon(self, data, seg, s) -> bool:
        text = self.partial() + data[seg:s]
        return self.colon >= 0 and not _NONBLANK.search(text, self.colon + 1)
