"""The facts the data plane reads at fixed positions of every Kafka frame, in one call per frame.

A forwarded request is never decoded: the gateway needs its header (API key and version, correlation id, client id,
where the body starts) and, for a Produce, ``acks``; a response only its correlation id. :func:`read_request`
reads all of a request's at once, :func:`correlation_id` a response's. With an authorizer, a Produce's and a Fetch's
topic names are facts of the frame too (:func:`produce_topic_names`, :func:`fetch_topic_names`: walked, not
decoded; ``gateway.auth.topic_names`` asks them).

This module is written once and runs in two forms, as the engine's compiled loops do: ``make setup`` compiles it
with Cython (pure-Python mode: the ``cython`` annotations type the locals, the byte reads become C), and the very
same source is its pure-Python twin, which runs wherever the extension was not built and which the tests run beside
the compiled form (``tests/gateway/wire/test_frame_facts.py``). :data:`COMPILED` says which form was imported.

A hostile frame cannot make either form read outside it: every read is checked against the frame's length first,
and what does not fit is an :class:`~quotaflow.core.errors.InvalidRequestError` (Kafka closes such a connection),
except ``acks``, which reads as :data:`ACKS_UNREADABLE` so that the caller decides (a request refused for another
reason keeps that reason).
"""

from __future__ import annotations

import cython

from quotaflow.core.errors import InvalidRequestError

COMPILED: bool = cython.compiled
"""True when the Cython-compiled form of this module was imported."""

ACKS_UNREADABLE: int = -0x10000  # outside int16: "not a Produce, or its acks could not be read"


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _uvarint(data: cython.p_const_uchar, pos: cython.Py_ssize_t,
             size: cython.Py_ssize_t) -> tuple[cython.Py_ssize_t, cython.longlong]:
    """An unsigned varint at ``pos``: (the position after it, its value), or (-1, 0) if truncated or oversized."""
    value: cython.longlong = 0
    shift: cython.int = 0
    b: cython.int
    while True:
        if pos >= size or shift > 28:
            return -1, 0
        b = data[pos]
        pos += 1
        value |= cython.cast(cython.longlong, b & 0x7F) << shift
        if not b & 0x80:
            return pos, value
        shift += 7


@cython.cfunc
@cython.exceptval(check=False)
def _skip_tags(data: cython.p_const_uchar, pos: cython.Py_ssize_t, size: cython.Py_ssize_t) -> cython.Py_ssize_t:
    """The position after a tagged-field section at ``pos`` (a count, then tag, size and bytes each), or -1 if it
    runs past the end."""
    count: cython.longlong
    value: cython.longlong
    pos, count = _uvarint(data, pos, size)
    while pos >= 0 and count > 0:
        pos, value = _uvarint(data, pos, size)  # the tag
        if pos >= 0:
            pos, value = _uvarint(data, pos, size)
            pos = pos + value if pos >= 0 and pos + value <= size else -1
        count -= 1
    return pos


def read_request(frame: bytes, flexible_from: bytes, header: type = tuple, offset: cython.Py_ssize_t = 0) -> tuple:
    """``(fields, acks)`` of one request frame (without its size prefix, or with it and ``offset`` 4: the frame
    starts there, and every offset returned is counted from there): ``fields`` is ``(api_key, api_version,
    correlation_id, client_id, end, body)`` made as a ``header`` (a tuple subclass: the gateway's ``RequestHeader``,
    so that one call reads and builds it), ``end`` the offset after ``client_id`` (None when null), ``body`` where the
    body starts (after the header's tagged fields when this version is flexible); ``acks`` a Produce's (else
    :data:`ACKS_UNREADABLE`).

    ``flexible_from[api_key]`` is the first flexible version of each API (255: none, or an API past the table).
    A body offset past a malformed tagged-field section is -1: only the APIs that read their body need it, and
    they refuse the frame then."""
    size: cython.Py_ssize_t = len(frame) - offset
    if size < 10:
        raise InvalidRequestError(f"request frame of {size} bytes is shorter than a request header")
    data: cython.p_const_uchar = frame  # compiled: the bytes' own buffer, each read below checked against size
    if cython.compiled:
        data += offset  # type: ignore[assignment,operator]  # (a C pointer: the frame's first byte, no copy)
    elif offset:
        data = frame[offset:]
    api_key: cython.int = (data[0] << 8) | data[1]
    version: cython.int = (data[2] << 8) | data[3]
    correlation_id: cython.longlong = ((cython.cast(cython.longlong, data[4]) << 24) | (data[5] << 16)
                                       | (data[6] << 8) | data[7])
    n: cython.int = (data[8] << 8) | data[9]
    if api_key >= 0x8000:  # int16 / int32 fields are signed
        api_key -= 0x10000
    if version >= 0x8000:
        version -= 0x10000
    if correlation_id >= 0x80000000:
        correlation_id -= 0x100000000
    if n >= 0x8000:
        n -= 0x10000
    end: cython.Py_ssize_t = 10
    client_id: object = None
    if n >= 0:
        end = 10 + n
        if end > size:
            raise InvalidRequestError("client_id runs past the end of the request frame")
        try:
            client_id = frame[offset + 10:offset + end].decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRequestError("client_id is not UTF-8") from e
    body: cython.Py_ssize_t = end
    flexible: cython.bint = 0 <= api_key < len(flexible_from) and version >= 0 and version >= flexible_from[api_key]
    value: cython.longlong = 0
    if flexible:  # the header's tagged fields
        body = _skip_tags(data, body, size)
    acks: cython.int = -0x10000  # ACKS_UNREADABLE
    pos: cython.Py_ssize_t = body
    if api_key == 0 and pos >= 0:  # Produce
        if version >= 3:  # transactional_id (compact or not) comes first
            if flexible:
                pos, value = _uvarint(data, pos, size)
                if pos >= 0 and value > 1:
                    pos += value - 1
            elif pos + 2 <= size:
                n = (data[pos] << 8) | data[pos + 1]
                if n < 0x8000:  # null (-1) and empty take no bytes
                    pos += n
                pos += 2
            else:
                pos = -1
        if pos >= 0 and pos + 2 <= size:
            acks = (data[pos] << 8) | data[pos + 1]
            if acks >= 0x8000:
                acks -= 0x10000
    if not cython.compiled:
        return tuple.__new__(header, (api_key, version, correlation_id, client_id, end, body)), acks
    # compiled: made as tuple.__new__(header, fields) makes it, without its Python call and the copy it makes
    made: object = _new_tuple(header, 6)
    _put(made, 0, api_key)
    _put(made, 1, version)
    _put(made, 2, correlation_id)
    _put(made, 3, client_id)
    _put(made, 4, end)
    _put(made, 5, body)
    return made, acks


def _new_tuple(cls: type, size: cython.Py_ssize_t) -> object:
    """An empty (NULL-filled) tuple of ``cls``, a tuple subclass or tuple itself, as ``tuple.__new__`` allocates
    one; :func:`_put` fills it (compiled only)."""
    if not PyType_IsSubtype(cls, tuple):  # type: ignore[name-defined]  # noqa: F821
        raise TypeError(f"{cls.__name__} is not a tuple type")
    return PyType_GenericAlloc(cls, size)  # type: ignore[name-defined]  # noqa: F821


def _put(made: object, i: cython.Py_ssize_t, value: object) -> None:
    """Set item ``i`` of a tuple from :func:`_new_tuple` (PyTuple_SET_ITEM takes the reference given it)."""
    Py_INCREF(value)  # type: ignore[name-defined]  # noqa: F821
    PyTuple_SET_ITEM(made, i, value)  # type: ignore[name-defined]  # noqa: F821


def correlation_id(frame: bytes, offset: cython.Py_ssize_t = 0) -> cython.longlong:
    """The correlation id of a response frame (without its size prefix, or with it and ``offset`` 4); -1 for a
    frame shorter than 4 bytes (no request has it: the caller refuses the response as out of order)."""
    if len(frame) - offset < 4:
        return -1
    data: cython.p_const_uchar = frame
    value: cython.longlong = ((cython.cast(cython.longlong, data[offset]) << 24) | (data[offset + 1] << 16)
                              | (data[offset + 2] << 8) | data[offset + 3])
    return value - 0x100000000 if value >= 0x80000000 else value


# -- the topic names of a Produce or Fetch (what authorizing one needs; gateway.auth.topic_names) -----------------

@cython.cfunc
def _int32(data: cython.p_const_uchar, pos: cython.Py_ssize_t, size: cython.Py_ssize_t) -> cython.longlong:
    """The signed int32 at ``pos``; raises when it runs past the end."""
    if pos < 0 or pos + 4 > size:
        raise InvalidRequestError("malformed request: an int32 runs past the end of the frame")
    value: cython.longlong = ((cython.cast(cython.longlong, data[pos]) << 24) | (data[pos + 1] << 16)
                              | (data[pos + 2] << 8) | data[pos + 3])
    return value - 0x100000000 if value >= 0x80000000 else value


@cython.cfunc
def _text(frame: bytes, pos: cython.Py_ssize_t, n: cython.longlong, api: str) -> str:
    """The ``n`` bytes at ``pos`` as UTF-8 (a topic name or transactional id)."""
    if n < 0 or pos + n > len(frame):
        raise InvalidRequestError("topic name missing or running past the end of the request")
    try:
        return frame[pos:pos + n].decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequestError(f"malformed {api} request: {e}") from e


@cython.cfunc
def _overrun(api: str) -> InvalidRequestError:
    return InvalidRequestError(f"malformed {api} request: it runs past the end of the frame")


@cython.cfunc
def _string16(frame: bytes, pos: cython.Py_ssize_t, nullable: cython.bint,
              api: str) -> tuple[object, cython.Py_ssize_t]:
    """A STRING (int16 length; -1 is null when ``nullable``) at ``pos``: (its text or None, the position after)."""
    if pos + 2 > len(frame):
        raise _overrun(api)
    data: cython.p_const_uchar = frame
    n: cython.Py_ssize_t = (data[pos] << 8) | data[pos + 1]
    if n >= 0x8000:
        n -= 0x10000
    if n < 0 and nullable:
        return None, pos + 2
    return _text(frame, pos + 2, n, api), pos + 2 + n


@cython.cfunc
def _compact_string(frame: bytes, pos: cython.Py_ssize_t, nullable: cython.bint,
                    api: str) -> tuple[object, cython.Py_ssize_t]:
    """A COMPACT_STRING (length + 1 as an unsigned varint; 0 is null when ``nullable``) at ``pos``: (its text or
    None, the position after)."""
    data: cython.p_const_uchar = frame
    n: cython.longlong
    pos, n = _uvarint(data, pos, len(frame))
    if pos < 0:
        raise _overrun(api)
    if n == 0 and nullable:
        return None, pos
    return _text(frame, pos, n - 1, api), pos + n - 1


def produce_topic_names(frame: bytes, pos: cython.Py_ssize_t, flexible: cython.bint) -> tuple:
    """``(transactional_id, topic names in request order)`` of a Produce request v3+ whose body starts at ``pos``
    (``flexible``: v9+, compact strings and arrays with tagged fields): every partition's records are skipped by
    their size, nothing is decoded. Raises :class:`~quotaflow.core.errors.InvalidRequestError` for a frame that
    runs past its end or names a topic in bytes that are not UTF-8."""
    size: cython.Py_ssize_t = len(frame)
    data: cython.p_const_uchar = frame
    names: list = []
    transactional_id: object = None
    topics: cython.longlong
    partitions: cython.longlong
    length: cython.longlong
    if pos < 0:  # (every later position only grows from here)
        raise _overrun("Produce")
    if flexible:
        transactional_id, pos = _compact_string(frame, pos, True, "Produce")
        pos, topics = _uvarint(data, pos + 6, size)  # after acks and timeout_ms
        while pos >= 0 and topics > 1:
            name, pos = _compact_string(frame, pos, False, "Produce")
            names.append(name)
            pos, partitions = _uvarint(data, pos, size)
            while pos >= 0 and partitions > 1:
                pos, length = _uvarint(data, pos + 4, size)  # after the index: the records' length + 1
                if pos >= 0:
                    pos = _skip_tags(data, pos + (length - 1 if length > 1 else 0), size)
                partitions -= 1
            if pos >= 0:
                pos = _skip_tags(data, pos, size)
            topics -= 1
        if pos < 0:
            raise _overrun("Produce")
    else:
        transactional_id, pos = _string16(frame, pos, True, "Produce")
        pos += 6  # acks and timeout_ms
        topics = _int32(data, pos, size)
        pos += 4
        while topics > 0:
            name, pos = _string16(frame, pos, False, "Produce")
            names.append(name)
            partitions = _int32(data, pos, size)
            pos += 4
            while partitions > 0:
                length = _int32(data, pos + 4, size)  # after the index: the records' length
                pos += 8 + (length if length > 0 else 0)
                partitions -= 1
            topics -= 1
    if pos > size:
        raise InvalidRequestError("Produce request truncated")
    return transactional_id, names


def fetch_topic_names(frame: bytes, pos: cython.Py_ssize_t, flexible: cython.bint,
                      partition_size: cython.Py_ssize_t) -> list:
    """The topic names of a Fetch request whose topics array starts at ``pos`` (``flexible``: v12+; each partition
    entry ``partition_size`` bytes before its tagged fields), in request order; forgotten topics are left out.
    Raises :class:`~quotaflow.core.errors.InvalidRequestError` as :func:`produce_topic_names` does."""
    size: cython.Py_ssize_t = len(frame)
    data: cython.p_const_uchar = frame
    names: list = []
    topics: cython.longlong
    partitions: cython.longlong
    if pos < 0:  # (every later position only grows from here)
        raise _overrun("Fetch")
    if flexible:
        pos, topics = _uvarint(data, pos, size)
        while pos >= 0 and topics > 1:
            name, pos = _compact_string(frame, pos, False, "Fetch")
            names.append(name)
            pos, partitions = _uvarint(data, pos, size)
            while pos >= 0 and partitions > 1:
                pos = _skip_tags(data, pos + partition_size, size)
                partitions -= 1
            if pos >= 0:
                pos = _skip_tags(data, pos, size)
            topics -= 1
        if pos < 0:
            raise _overrun("Fetch")
    else:
        topics = _int32(data, pos, size)
        pos += 4
        while topics > 0:
            name, pos = _string16(frame, pos, False, "Fetch")
            names.append(name)
            partitions = _int32(data, pos, size)
            pos += 4 + (partitions if partitions > 0 else 0) * partition_size
            topics -= 1
    if pos > size:
        raise InvalidRequestError("Fetch request truncated")
    return names

