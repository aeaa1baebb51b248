"""Decompressed bytes of a trace file, in blocks, without reading it whole.

A damaged or cut-off gzip stream yields everything up to the damage and then
records what went wrong in ``problem``: the caller salvages complete events
from what came through.
"""

import zlib

BLOCK = 8 << 20
GZIP_MAGIC = b"\x1f\x8b"


class ByteStream:
    def __init__(self, path):
        self.path = path
        self.problem = None  # set when the stream ended early
        self.compressed = False

    def blocks(self):
        with open(self.path, "rb") as f:
            first = f.read(BLOCK)
            self.compressed = first[:2] == GZIP_MAGIC
            if not self.compressed:
                while first:
                    yield first
                    first = f.read(BLOCK)
                return
            yield from self._gunzip(f, first)

    def _gunzip(self, f, data):
        d = zlib.decompressobj(wbits=47)
        produced = 0
        while data:
            try:
                out = d.decompress(data, BLOCK)
                while out:
                    produced += len(out)
                    yield out
                    out = d.decompress(d.unconsumed_tail, BLOCK) if d.unconsumed_tail else b""
            except zlib.error as e:
                self.problem = f"corrupt gzip data after {produced} decompressed bytes ({e})"
                return
            if d.eof:
                rest = d.unused_data
                if rest.strip(b"\x00"):
                    # a second gzip member: concatenated streams decompress in sequence
                    d = zlib.decompressobj(wbits=47)
                    data = rest
                    continue
                return
            data = f.read(BLOCK)
        if not d.eof:
            self.problem = f"gzip stream ends early (cut off after {produced} decompressed bytes)"
