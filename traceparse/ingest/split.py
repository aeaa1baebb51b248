"""Split a trace's JSON into its header and batches of decoded events.

The ``traceEvents`` array is cut at event boundaries into batches of a few MB
and each batch is decoded on its own, so memory stays bounded whatever the
file size. A cut is only a guess (a ``}`` followed by ``,`` and ``{``); a wrong
guess leaves an unbalanced batch that the decoder rejects, and the batch is
then re-cut at an earlier boundary or extended. A file that ends inside the
array (a crashed job) yields every complete event and reports what was lost.
"""

import re

import msgspec

from ..errors import TraceError
from .model import EVENTS, HEADER, Header
from .stream import ByteStream

ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
BOUNDARY = re.compile(rb"\}\s*,\s*\{")
TAIL_AFTER = re.compile(rb"\}\s*(?:,|\]|$)")
BATCH = 8 << 20
MAX_PENDING = 1 << 30
SALVAGE_TRIES = 256


class Salvage:
    """What a cut-off file lost."""

    def __init__(self, lost_bytes: int, lost_events: int, reason: str):
        self.lost_bytes = lost_bytes
        self.lost_events = lost_events
        self.reason = reason


class TraceSplitter:
    def __init__(self, path):
        self.path = path
        self.stream = ByteStream(path)
        self.header = Header()
        self.salvage = None

    def batches(self):
        """Yield lists of decoded events; sets ``header`` and ``salvage``."""
        blocks = self.stream.blocks()
        buf, bare_array = self._find_array(blocks)
        for block in blocks:
            buf += block
            if len(buf) >= BATCH:
                events, buf = self._cut(buf)
                if events:
                    yield events
                elif len(buf) > MAX_PENDING:
                    raise TraceError(self.path, "no event boundary found in 1 GiB of traceEvents")
        yield from self._finish(buf, bare_array)

    def _find_array(self, blocks):
        buf = b""
        for block in blocks:
            buf += block
            start = buf.lstrip()[:1]
            if start == b"[":
                return buf[buf.index(b"[") + 1 :], True
            if start and start != b"{":
                raise TraceError(self.path, self._not_json_problem())
            m = ARRAY_START.search(buf)
            if m:
                self.header = self._decode_header(buf[: m.end()] + b"]}")
                return buf[m.end() :], False
            if len(buf) > MAX_PENDING:
                break
        if self.stream.problem and not buf:
            raise TraceError(self.path, self.stream.problem)
        if not buf.strip():
            raise TraceError(self.path, "empty file" if not self.stream.problem else self.stream.problem)
        try:
            msgspec.json.decode(buf)
        except msgspec.DecodeError:
            raise TraceError(self.path, self.stream.problem or "not JSON, or JSON cut off before traceEvents") from None
        raise TraceError(self.path, "JSON without traceEvents: not a PyTorch profiler trace")

    def _not_json_problem(self):
        return self.stream.problem or "not JSON (the file does not start with '{' or '[')"

    def _decode_header(self, text):
        try:
            return HEADER.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return Header()

    def _cut(self, buf, limit=None):
        """Decode the longest prefix of ``buf`` that ends at an event boundary."""
        end = len(buf) if limit is None else limit
        for _ in range(8):
            k = buf.rfind(b"}", 0, end)
            m = None
            while k >= 0 and not (m := BOUNDARY.match(buf, k)):
                k = buf.rfind(b"}", 0, k)
            if m is None:
                return [], buf
            try:
                events = EVENTS.decode(b"[" + buf[: k + 1] + b"]")
            except (msgspec.DecodeError, msgspec.ValidationError):
                end = k
                continue
            return events, buf[m.end() - 1 :]
        return [], buf

    def _finish(self, buf, bare_array):
        text = b'{"traceEvents":[' + buf + (b"}" if bare_array else b"")
        try:
            tail = HEADER.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            yield from self._salvage(buf)
            return
        self._merge_tail(tail)
        if tail.traceEvents:
            yield tail.traceEvents

    def _merge_tail(self, tail):
        for field in Header.__struct_fields__:
            if field != "traceEvents" and getattr(self.header, field) is None:
                setattr(self.header, field, getattr(tail, field))

    def _salvage(self, buf):
        end = len(buf)
        for _ in range(SALVAGE_TRIES):
            k = buf.rfind(b"}", 0, end)
            if k < 0:
                break
            end = k
            if not TAIL_AFTER.match(buf, k):
                continue
            try:
                events = EVENTS.decode(b"[" + buf[: k + 1] + b"]")
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            self.salvage = self._lost(buf[k + 1 :])
            yield events
            return
        self.salvage = self._lost(buf)

    def _lost(self, rest):
        lost_events = rest.count(b'"ph"')
        closed = re.match(rb"\s*\]", rest) is not None
        reason = self.stream.problem or (
            "JSON cut off after traceEvents (the rest of the header is lost)" if closed
            else "JSON cut off inside traceEvents"
        )
        return Salvage(len(rest), lost_events, reason)
