"""Reading what msgspec refuses: an event or header value decoded member by member.

When an event does not decode as a whole (a NaN, invalid UTF-8, a lone surrogate, ``args`` that is
not an object, a number out of range, nesting too deep for the decoder), its members are decoded
one at a time: a member that fails costs that field (read as null), not the event, and an event
is lost only when it is not an object at all, its brackets do not balance, or its ``ph`` is
unreadable. A bad value under a key traceparse never reads costs nothing but is still said.
Header values (``distributedInfo``, ...) are read the same way, one level down: a NaN in
``distributedInfo.pg_count`` costs that key, not the rank.

Every loss is counted in ``problems`` (a Counter of load-issue texts, the count put in front
by the caller), so nothing is dropped silently.
"""

import re
import sys

import msgspec

from traceparse.ingest.model import Args, Event, Header
from traceparse.ingest.scan import Scanner

ANY = msgspec.json.Decoder()
RAW = msgspec.json.Decoder(msgspec.Raw)
KEY = msgspec.json.Decoder(str)
EVENT = msgspec.json.Decoder(Event)
ARGS = msgspec.json.Decoder(Args | None)


class _Nothing(msgspec.Struct):
    pass


# decodes {"v": <value>} without building the value: checks a value traceparse does not read
_SKIP = msgspec.json.Decoder(_Nothing)
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
_NONBLANK = re.compile(rb"[^ \t\n\r]")
_NONFINITE = re.compile(rb"-?(?:NaN|Infinity)")
_EXPECTED = re.compile(r"Expected `([^`]*)`, got `([^`]*)`")


def _decoders(struct) -> dict:
    """JSON name -> (attribute, decoder) of a struct's fields."""
    out = {}
    for f in msgspec.structs.fields(struct):
        out[f.encode_name] = (f.name, RAW if f.type is msgspec.Raw else ANY)
    return out


EVENT_FIELDS = {**_decoders(Event), "args": ("args", ARGS)}
ARGS_FIELDS = _decoders(Args)
HEADER_FIELDS = frozenset(f for f in Header.__struct_fields__ if f != "traceEvents")

LOST = "event(s) in traceEvents not loaded: "
UNREAD = "event(s) with an unreadable value under a key traceparse does not read ({}): event kept"


def why(exc: BaseException, text=b"", shift: int = 0) -> str:
    """The kind of problem a decode error reports, in words (no offsets: issues of one kind add up)."""
    if isinstance(exc, RecursionError):
        return f"nested deeper than about {sys.getrecursionlimit()} levels"
    msg = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        if "out of range" in msg:
            return "a number out of range"
        m = _EXPECTED.match(msg)
        if m:
            expected = m[1].replace(" | null", "")
            return f"{_article(m[2])} where {_article(expected)} was expected"
        return "a value of the wrong type"
    if "UTF-8" in msg:
        return "invalid UTF-8"
    if "escape" in msg or ("truncated" in msg and b"\\u" in text):
        return "an invalid string escape (e.g. a lone surrogate)"
    m = re.search(r"invalid character \(byte (\d+)\)", msg)
    if m:
        i = int(m[1]) - shift
        if _NONFINITE.match(text, max(i - 1, 0)) or _NONFINITE.match(text, max(i, 0)):
            return "NaN or Infinity (not JSON)"
        if 0 <= i < len(text) and text[i] < 0x20:
            return "a raw control character in a string"
    return "malformed JSON"


def _article(kind: str) -> str:
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


def _not_object(body) -> str:
    c = body[:1]
    if c == b"[":
        kind = "an array"
    elif c == b'"':
        kind = "a string"
    elif c in (b"t", b"f"):
        kind = "a boolean"
    elif c == b"n":
        kind = "null"
    elif c and (c.isdigit() or c == b"-") and not _NONFINITE.match(body):
        kind = "a number"
    else:
        return "not JSON (" + ("NaN or Infinity" if _NONFINITE.match(body) else "malformed") + "), not an event object"
    return f"{kind}, not an event object"


def members(text, problems, what: str):
    """(key, value text) of each member of the JSON object ``text``; None when it is not an object
    whose brackets balance (the reason is returned instead)."""
    body = text.strip()
    if body[:1] != b"{":
        return None, _not_object(body)
    sc = Scanner(len(body) + 1)
    p = sc.feed(body, 1)
    if not sc.closed or _NONBLANK.search(body, p):
        return None, "malformed JSON (brackets do not balance, or text follows the object)"
    if sc.extra_commas:
        problems[f"{what} with an extra comma between members: read anyway"] += 1
    found = keyed(sc.values, problems, f"{what} with a member that is not key: value: member ignored",
                  lambda reason: f"{what} with an unreadable member key ({reason}): member ignored")
    return list(found), None


def keyed(values, problems, not_a_pair: str, bad_key: str):
    """(key, value text) of each scanned member (scan.Value); one that is no key: value pair, or whose
    key does not decode, is counted under ``not_a_pair`` or ``bad_key(why)`` and skipped."""
    for v in values:
        if v.colon < 0:
            problems[not_a_pair] += 1
            continue
        try:
            key = KEY.decode(v.text[: v.colon])
        except DECODE_ERRORS as e:
            problems[bad_key(why(e, v.text[: v.colon]))] += 1
            continue
        yield key, v.text[v.colon + 1 :]


def check_unread(value, problems, message: str) -> bool:
    """Validate a value traceparse does not read, without building it; count it when bad. (Skipping
    does not check UTF-8 inside strings: that is checked on its own, JSON text must be UTF-8.)"""
    try:
        _SKIP.decode(b'{"v":' + value + b"}")
        bytes(value).decode("utf-8")
    except DECODE_ERRORS as e:
        problems[message.format(why(e, value, 5))] += 1
        return False
    except UnicodeDecodeError:
        problems[message.format("invalid UTF-8")] += 1
        return False
    return True


def event(text, problems) -> Event | None:
    """The event in ``text`` (one element of traceEvents), read whole or member by member."""
    try:
        return EVENT.decode(text)
    except DECODE_ERRORS:
        pass
    found, bad = members(text, problems, "event(s)")
    if found is None:
        problems[LOST + bad] += 1
        return None
    fields, failed = _read_fields(found, EVENT_FIELDS, problems, nested={"args": _args})
    ph = next((w for k, w in failed if k == "ph"), None)
    if ph:
        problems[LOST + f"'ph' is unreadable ({ph})"] += 1
        return None
    _count_failed(failed, "", problems)
    return Event(**fields)


def _args(text, problems) -> Args:
    found, _ = members(text, problems, "event args")
    fields, failed = _read_fields(found or (), ARGS_FIELDS, problems)
    _count_failed(failed, "args.", problems)
    return Args(**fields)


def _read_fields(found, table: dict, problems, nested=None) -> tuple[dict, list]:
    """Decode the members named in ``table`` (JSON name -> (attribute, decoder)); others are only
    checked (check_unread). A member that fails is left out (read as null) and returned in ``failed``
    as (key, why), unless ``nested`` names a reader for it and it is an object, read member by member."""
    fields, failed = {}, []
    for key, value in found:
        spec = table.get(key)
        if spec is None:
            check_unread(value, problems, UNREAD)
            continue
        attr, decoder = spec
        try:
            fields[attr] = decoder.decode(value)
        except DECODE_ERRORS as e:
            if nested and key in nested and value.strip()[:1] == b"{":
                fields[attr] = nested[key](value, problems)
                continue
            fields.pop(attr, None)
            failed.append((key, why(e, value)))
    return fields, failed


def _count_failed(failed, prefix: str, problems):
    for key, reason in failed:
        problems[f"event field(s) '{prefix}{key}' unreadable, read as null: {reason}"] += 1


def header_members(values, header: Header, problems, only_unset: bool):
    """Set ``header``'s fields from scanned top-level members (scan.Value); with ``only_unset``
    (members after traceEvents) a field already set before the events is kept."""
    for key, value in keyed(values, problems, "header member that is not key: value: ignored",
                            lambda reason: f"header member with an unreadable key ({reason}): ignored"):
        if key == "traceEvents":
            continue
        if key not in HEADER_FIELDS:
            check_unread(value, problems, "header value under a key traceparse does not read is unreadable ({}): ignored")
            continue
        if only_unset and getattr(header, key) is not None:
            continue
        try:
            setattr(header, key, ANY.decode(value))
        except DECODE_ERRORS as e:
            if value.strip()[:1] == b"{":
                setattr(header, key, _header_object(key, value, problems))
            else:
                problems[f"header key '{key}' unreadable, ignored: {why(e, value)}"] += 1


def _header_object(name: str, text, problems) -> dict:
    """An object-valued header key read member by member: a bad member costs that member."""
    found, _ = members(text, problems, f"header key '{name}'")
    out = {}
    for key, value in found or ():
        try:
            out[key] = ANY.decode(value)
        except DECODE_ERRORS as e:
            problems[f"header key '{name}.{_short(key)}' unreadable, ignored: {why(e, value)}"] += 1
    return out


def _short(key: str) -> str:
    return key if len(key) <= 40 and key.isprintable() else repr(key[:40])
