"""Split a trace's JSON into its header and batches of decoded events.

The ``traceEvents`` array is cut into batches of a few MB and each batch is decoded on its own, so
memory stays bounded whatever the file size. Three ways of reading it, each byte read a bounded
number of times whatever the layout (cost linear in the file, memory a few batches plus one event):

- **fast**: the batch is cut at the last guessed event boundary (a ``}`` then ``,`` then ``{``) and
  msgspec decodes it whole; a successful decode proves the guess.
- **guided** (when a batch does not decode): the batch's guessed boundaries are checked a group at
  a time, then one at a time; a stretch that does not decode by itself (a bad value, or a guess
  inside a string) is split exactly by the scanner (scan.py) and each of its events is read
  member by member (repair.py): a bad value costs that field, or that event, counted by kind.
- **scan** (a stretch of more than two batches with no boundary to guess: a huge event, gigabytes
  of whitespace): the scanner reads it, keeping only the event in progress (whitespace squeezed);
  an event larger than ``MAX_VALUE`` refuses the file.

A file that ends inside the array (a crashed job) yields every complete event and reports what was
lost; a bad value in the middle is never taken for the end of the file. The header is read with
the scanner too, member by member, so a bad ``distributedInfo`` (before or after the events)
costs what is bad in it and is said in ``problems``.
"""

import re
from collections import Counter

from traceparse.errors import TraceError
from traceparse.ingest import column_batch, repair
from traceparse.ingest.model import EVENTS, HEADER, Header
from traceparse.ingest.repair import DECODE_ERRORS
from traceparse.ingest.scan import Scanner, ValueTooLarge
from traceparse.ingest.stream import ByteStream

BOUNDARY = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
NONBLANK = re.compile(rb"[^ \t\n\r]")
BATCH = 8 << 20
# the fast path holds at most this much text without a boundary before the scanner takes it
MAX_FAST = 2 * BATCH
# objects ('{') in one batch: a batch of tiny events decodes into at most about this many structs
MAX_OBJECTS = 200_000
# one event (or header value) larger than this refuses the file (its text must be held to decode it)
MAX_VALUE = 256 << 20
# guessed events decoded together in the guided path before trying them one at a time
GROUP = 256
# '}' looked at, from the end, for a guessed boundary
CANDIDATES = 64


class Salvage:
    """What a cut-off file lost."""

    def __init__(self, lost_bytes: int, lost_events: int, reason: str, inside_events: bool = True):
        self.lost_bytes = lost_bytes
        self.lost_events = lost_events
        self.reason = reason
        self.inside_events = inside_events  # cut inside traceEvents: every event after the cut is lost


class TraceSplitter:
    def __init__(self, path, columns: bool = False):
        """``columns``: batches the compiled decoder reads come as ``ColumnBatch`` (column_batch.py), not as lists
        of ``Event``."""
        self.path = path
        self.columns = columns
        self.stream = ByteStream(path)
        self.header = Header()
        self.salvage = None
        self.problems: Counter = Counter()  # load-issue text -> count (events or fields lost, ...)
        self.bare = False
        self.where = "header"

    def batches(self):
        """Yield lists of decoded events; sets ``header``, ``salvage`` and ``problems``."""
        blocks = iter(self.stream.blocks())
        try:
            data, pos, start = self._read_header(blocks)
            self.where = "traceEvents"
            yield from self._read_events(blocks, data, pos, start)
        except ValueTooLarge as e:
            what = "an event in traceEvents" if self.where == "traceEvents" else "a header value"
            raise TraceError(self.path, f"{what} is larger than {MAX_VALUE >> 20} MiB (at byte {e.offset} of the "
                                        "decompressed JSON): refusing the file") from None

    # -- header ---------------------------------------------------------------------------------

    def _read_header(self, blocks):
        """Read up to the traceEvents array; return (block, position after its '[', stream offset of the block)."""
        offset = 0
        sc = None
        for block in blocks:
            pos = 0
            if sc is None:
                m = NONBLANK.search(block)
                if m is None:
                    offset += len(block)
                    continue
                c = block[m.start()]
                if c == 0x5B:  # '[': a bare array of events
                    self.bare = True
                    return block, m.start() + 1, offset
                if c != 0x7B:
                    raise TraceError(self.path, self.stream.problem or "not JSON (the file does not start with '{' or '[')")
                pos = m.start() + 1
                sc = Scanner(MAX_VALUE, offset + pos, events_key=True, max_values=1024)
            while True:
                pos = sc.feed(block, pos)
                self._header_values(sc, only_unset=False)
                if sc.found_events:
                    return block, pos, offset
                if sc.closed:
                    raise TraceError(self.path, "JSON without traceEvents: not a PyTorch profiler trace")
                if pos >= len(block):
                    break
            offset += len(block)
        if sc is None:
            raise TraceError(self.path, self.stream.problem or "empty file")
        raise TraceError(self.path, self.stream.problem or "not JSON, or JSON cut off before traceEvents")

    def _header_values(self, sc, only_unset):
        if sc.values:
            repair.header_members(sc.values, self.header, self.problems, only_unset)
            sc.values.clear()

    # -- events ---------------------------------------------------------------------------------

    def _read_events(self, blocks, data, pos, start):
        self.mode = "fast"  # fast | scan | trailer | done
        self.pending: list[bytes] = []
        self.plen = 0
        self.poff = start + pos  # stream offset of the pending text
        self.after_comma = False  # whether the pending text follows a comma
        self.scanner = None
        self.eof = False
        self.garbage = False
        self.seen = start + len(data)  # stream offset of the end of what was read
        yield from self._take(data, pos)
        for block in blocks:
            self.seen += len(block)
            yield from self._take(block, 0)
        yield from self._finish()

    def _take(self, data, pos):
        """Read ``data[pos:]`` in the current mode (modes change on the way)."""
        n = len(data)
        cand = -1  # next guessed boundary in data at or after the scan position (n: none)
        while True:
            mode = self.mode
            if mode == "fast":
                if pos < n:
                    self.pending.append(data if pos == 0 else data[pos:])
                    self.plen += n - pos
                if self.plen < BATCH:
                    return
                rest = yield from self._fast(final=False)
                if rest is None:
                    return
                data, pos = rest
                n = len(data)
                cand = -1
            elif mode == "scan":
                sc = self.scanner
                p = sc.feed(data, pos, stop=pos)
                events = self._events_of(sc)
                if events:
                    yield events
                if sc.closed:
                    self._start_trailer(sc.offset)
                    pos = p
                    continue
                if p >= n:
                    return
                pos = p
                if not self.eof:
                    if cand < pos:
                        m = BOUNDARY.search(data, pos)
                        cand = m.start() if m else n
                    if cand < n:  # a guessed boundary ahead: back to the fast path
                        self._to_fast(sc.offset)
            elif mode == "trailer":
                sc = self.scanner
                pos = sc.feed(data, pos)
                self._header_values(sc, only_unset=True)
                if sc.closed:
                    self.mode = "done"
                    continue
                if pos >= n:
                    return
            else:  # done: only whitespace may follow
                if pos < n and NONBLANK.search(data, pos):
                    self.garbage = True
                return

    def _to_fast(self, offset):
        self.mode = "fast"
        self.scanner = None
        self.pending, self.plen = [], 0
        self.poff = offset
        self.after_comma = True

    def _to_scan(self, buf, a):
        """The scanner reads buf from a (an event boundary; self.poff is the stream offset of buf[0]):
        (buf, a) is what _take goes on with."""
        self.mode = "scan"
        self.scanner = Scanner(MAX_VALUE, self.poff + a, after_comma=self.after_comma or a > 0, max_values=GROUP)
        self.pending, self.plen = [], 0
        return buf, a

    def _start_trailer(self, offset):
        """The array is closed: the rest of the top-level object follows (nothing, for a bare array)."""
        self.where = "header"
        if self.bare:
            self.mode = "done"
            self.scanner = None
        else:
            self.mode = "trailer"
            self.scanner = Scanner(MAX_VALUE, offset, max_values=1024)

    def _join(self) -> bytes:
        buf = self.pending[0] if len(self.pending) == 1 else b"".join(self.pending)
        self.pending = [buf] if buf else []
        return buf

    def _fast(self, final):
        """Cut and decode batches from the pending text while it holds a batch (at the end, while any
        boundary remains and the text is large). Returns None, or (text, position) to go on with in
        the mode it switched to."""
        buf = self._join()
        a = 0  # buf[a:] is still to read
        while True:
            left = len(buf) - a
            end = len(buf) if left < 2 * BATCH else a + BATCH
            n_obj = buf.count(b"{", a, end)
            if not (left >= BATCH or (final and n_obj > MAX_OBJECTS)):
                break
            limit = end if n_obj <= MAX_OBJECTS else a + max(1, (end - a) * MAX_OBJECTS // n_obj)
            cut = self._last_boundary(buf, a, limit)
            if cut is None:
                if final or left < MAX_FAST:
                    break
                return self._to_scan(buf, a)
            end, nxt = cut
            got = column_batch.decode(buf, a, end) if self.columns else None
            batch = got[0] if got else self._decode_list(buf, a, end)
            if batch is None:
                events, b, state = self._guided(buf, a, end)
                if events:
                    yield events
                if state == "closed":
                    self._start_trailer(self.poff + b)
                    return buf, b
                if state == "scan":
                    self.pending, self.plen = [], 0
                    return None
                nxt = b
            else:
                yield batch
            a = nxt
            self.after_comma = True
        self.poff += a  # self.poff was the stream offset of buf[0]
        buf = buf[a:] if a else buf
        self.pending = [buf] if buf else []
        self.plen = len(buf)
        return None

    def _last_boundary(self, buf, a, limit):
        """(end of an event, start of the next) at the last guessed boundary in buf[a:limit]."""
        k = limit
        for _ in range(CANDIDATES):
            k = buf.rfind(b"}", a, k)
            if k < 0:
                return None
            m = BOUNDARY.match(buf, k)
            if m:
                return k + 1, m.end() - 1
        return None

    @staticmethod
    def _decode_list(buf, a, end):
        try:
            return EVENTS.decode(b"[" + buf[a:end] + b"]")
        except DECODE_ERRORS:
            return None

    def _guided(self, buf, a, limit):
        """Events of buf from ``a`` (where an event starts) to its last guessed boundary before ``limit``,
        bad ones read member by member. Returns (events, position, state): state ``fast``: the text
        from the position on is still to read; ``closed``: the array ended before it; ``scan``: the
        scanner holds an event that goes on past the end of buf."""
        cuts = []
        for m in BOUNDARY.finditer(buf, a):
            if m.start() >= limit:
                break
            cuts.append((m.start() + 1, m.end() - 1))
        out = []
        i = 0
        while i < len(cuts):
            if cuts[i][1] <= a:
                i += 1
                continue
            j = min(i + GROUP, len(cuts))
            batch = self._decode_list(buf, a, cuts[j - 1][0])
            if batch is not None:
                out.extend(batch)
                a = cuts[j - 1][1]
                i = j
                continue
            while i < j:  # one guessed event at a time
                end, nxt = cuts[i]
                i += 1
                if nxt <= a:
                    continue
                try:
                    out.append(repair.EVENT.decode(buf[a:end]))
                    a = nxt
                    continue
                except DECODE_ERRORS:
                    pass
                a, state = self._exact(buf, a, end, out)
                if state != "fast":
                    return out, a, state
        return out, a, "fast"

    def _exact(self, buf, a, end, out):
        """Split buf from ``a`` exactly up to the first separator at or after ``end``; read each event."""
        sc = Scanner(MAX_VALUE, self.poff + a, after_comma=self.after_comma or a > 0, max_values=GROUP)
        while True:
            p = sc.feed(buf, a, stop=end)
            out.extend(self._events_of(sc))
            if sc.closed:
                return p, "closed"
            if p >= len(buf) and sc.in_value():
                self.scanner = sc
                self.mode = "scan"
                return p, "scan"
            if p - 1 >= end or p >= len(buf):
                return p, "fast"
            a = p

    def _events_of(self, sc) -> list:
        """The scanner's complete values as events (each read whole, else member by member)."""
        out = []
        for v in sc.values:
            ev = repair.event(v.text, self.problems)
            if ev is not None:
                out.append(ev)
        sc.values.clear()
        if sc.extra_commas:
            self.problems["extra comma(s) between events in traceEvents: ignored"] += sc.extra_commas
            sc.extra_commas = 0
        return out

    # -- the end --------------------------------------------------------------------------------

    def _finish(self):
        self.eof = True
        if self.mode == "fast":
            rest = yield from self._fast(final=True)
            if rest is None and self.mode == "fast":
                buf = self._join()
                whole = self._whole_tail(buf) if buf else None
                if whole is not None:
                    batches, tail = whole
                    yield from batches
                    self._merge_tail(tail)
                    self.mode = "done"
                else:
                    events, a, state = self._guided(buf, 0, len(buf))
                    if events:
                        yield events
                    if state == "closed":
                        self._start_trailer(self.poff + a)
                        rest = (buf, a)
                    elif state == "fast":
                        rest = self._to_scan(buf, a)
            if rest is not None:
                yield from self._take(*rest)
        sc = self.scanner
        if self.mode == "scan" and sc.in_value() and sc.depth == 0 and not sc.in_string:
            # the file ends just after an event, before its separator: the event is whole
            ev = repair.event(sc.partial(), self.problems)  # (a bad one is counted there)
            if ev is not None:
                yield [ev]
            sc.cur, sc.blank = None, True
        self._report_end()

    def _whole_tail(self, buf):
        """The text after the last batch (``buf``: the last events, the ']' closing traceEvents, the header's keys
        after it) decoded whole: ``(its batches of events, the Header it holds)``, or None where it does not decode
        (then ``_finish`` reads it in the guided way). The compiled decoder reads the events where it answers."""
        end = b"}" if self.bare else b""
        got = column_batch.decode(buf, 0, -1) if self.columns else None
        if got is not None:
            batch, stop = got
            try:
                tail = HEADER.decode(b'{"traceEvents":[]' + buf[stop:] + end)
            except DECODE_ERRORS:
                tail = None
            if tail is not None and not tail.traceEvents:  # (traceEvents given twice: the last counts, as below)
                return ([batch] if len(batch) else []), tail
        try:
            tail = HEADER.decode(b'{"traceEvents":[' + buf + end)
        except DECODE_ERRORS:
            return None
        return ([tail.traceEvents] if tail.traceEvents else []), tail

    def _merge_tail(self, tail):
        for field in Header.__struct_fields__:
            if field != "traceEvents" and getattr(self.header, field) is None:
                setattr(self.header, field, getattr(tail, field))

    def _report_end(self):
        problem = self.stream.problem
        if self.mode == "scan":
            sc = self.scanner
            partial = sc.partial()
            lost = partial.count(b'"ph"') or int(sc.in_value())
            self.salvage = Salvage(self.seen - sc.start, lost, problem or "JSON cut off inside traceEvents")
        elif self.mode == "trailer":
            sc = self.scanner
            self.salvage = Salvage(self.seen - sc.start, 0,
                                   problem or "JSON cut off after traceEvents (the rest of the header is lost)", False)
        elif problem:
            self.problems[f"{problem}, after the end of the JSON: nothing lost"] += 1
        if self.garbage:
            self.problems["text after the end of the JSON: ignored"] += 1
