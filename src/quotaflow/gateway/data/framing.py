"""Kafka's length-prefixed frames cut from a socket's bytes, for an ``asyncio.BufferedProtocol``.

The socket is read into one receive buffer; every frame that fits in it is cut out as ``bytes`` (one copy, as a
stream's ``readexactly`` made). The buffer starts small (``INITIAL_BUFFER``), grows on demand (doubling, to fit the
frame that arrives) up to its capacity, and is shrunk back by :meth:`FrameBuffer.release` once it is empty (the
gateway's housekeeping calls it for idle connections): an idle connection holds 1 KiB per socket, not its capacity. A
frame larger than the capacity is read straight into chunks of its own, which the protocol grants one at a time
(:meth:`FrameBuffer.wants` / :meth:`FrameBuffer.grant`), so that a client pool (``gateway.data.request_memory``) can
reserve the memory as the body arrives instead of trusting the size the frame announces. Chunks double from
``FIRST_CHUNK``: a frame holds at most about twice what it has received. Nothing is ever read past the frame being
assembled into a chunk, so bytes that follow it stay in the receive buffer (or in the kernel, while the connection is
paused).

Cut for every frame of every connection, so compiled as ``frame_facts`` is (``make setup`` builds it with Cython in
pure-Python mode: :class:`FrameBuffer` becomes the extension type ``framing.pxd`` declares, whose methods the compiled
connection core calls as C functions); this source is its pure-Python twin, and the tests run both forms
(``tests/gateway/data/test_framing.py``). ``framing.pyi`` is its typed interface: the annotations here are Cython's.
"""

from __future__ import annotations

from typing import Final

import cython

from quotaflow.core.errors import ConnectionClosed

COMPILED: bool = cython.compiled

RECEIVE_BUFFER: Final = 16 * 1024  # a client connection's most; frames up to this need no pool memory
INITIAL_BUFFER: Final = 1024  # what an idle connection holds; most requests (and many responses) fit
FIRST_CHUNK: Final = 64 * 1024


class FrameBuffer:
    """One socket's receive side: ``buffer()`` / ``updated(n)`` from the protocol, ``pop()`` for whole frames.
    Compiled: an extension type with C fields and cpdef methods (``framing.pxd``)."""

    def __init__(self, capacity: int = RECEIVE_BUFFER, initial: int = INITIAL_BUFFER) -> None:
        self._max = capacity  # the receive buffer grows up to this; larger frames are read into chunks
        self._initial = min(initial, capacity)
        self._buf = bytearray(self._initial)
        self._view = memoryview(self._buf)
        self._start = 0  # the receive buffer holds [start, end)
        self._end = 0
        self._size = 0  # > 0: the body size of the large frame being assembled in chunks
        self._chunks = []  # list[bytearray]
        self._allocated = 0  # bytes of its chunks
        self._got = 0  # body bytes in its chunks
        self._into_chunk = False  # the last buffer() handed out was the current chunk
        # a frame has begun arriving and is not complete (``_size > 0 or _end > _start``, kept as a plain attribute:
        # the connection asks several times per request)
        self.partial = False
        self.framed = False  # the frame the last pop returned has its size prefix

    @property
    def has_room(self) -> bool:
        """More bytes fit in the receive buffer, grown to its capacity if need be (no large frame is being
        assembled)."""
        return self.room()

    def room(self) -> bool:
        """:attr:`has_room` as a method: compiled, the connection core calls it as a C function once a request."""
        return not self._size and self._end - self._start < self._max

    @property
    def capacity(self) -> int:
        """Bytes this buffer holds now: the receive buffer's and its large frame's chunks."""
        return len(self._buf) + self._allocated

    @property
    def large(self) -> bool:
        """A frame larger than the receive buffer is being assembled."""
        return self._size > 0

    def buffer(self):  # -> memoryview (framing.pyi)
        """Where the next bytes from the socket go: the current chunk when it has room and nothing waits in the
        receive buffer, else the receive buffer's free end."""
        if self._size and self._got < self._allocated and self._start == self._end:
            self._into_chunk = True
            chunk = self._chunks[-1]
            return memoryview(chunk)[len(chunk) - (self._allocated - self._got):]
        self._into_chunk = False
        end = self._end
        if not end:
            return self._view  # the common case: the whole (empty) buffer, no new view
        if end == len(self._buf):
            self._compact()
            if self._end == len(self._buf) and not self._size:  # full of a frame's start or of small frames
                self._grow(self._end + 1)
        return self._view[self._end:]

    def updated(self, nbytes: cython.int) -> None:
        if self._into_chunk:
            self._got += nbytes
        else:
            self._end += nbytes
            if nbytes:
                self.partial = True

    def feed(self, data) -> None:  # data: bytes
        """Bytes that arrived before this buffer was the socket's (a stream's leftovers)."""
        pos = 0
        while pos < len(data):
            view = self.buffer()
            n = min(len(view), len(data) - pos)
            view[:n] = data[pos:pos + n]
            self.updated(n)
            pos += n
            if self._size:
                self._fill()

    def pop(self, limit: cython.int, setting: str, framed: cython.bint = False):  # -> bytes | None
        """The next whole frame, or None while it is incomplete (see :meth:`wants`): without its size prefix, or,
        ``framed``, with it, as it came, when the frame is cut from the receive buffer (so that it can be written on
        as one buffer; :attr:`framed` says which it is). A size outside ``0..limit`` raises ``ConnectionClosed``
        with Kafka's message."""
        if self._size:
            self._fill()
            if self._got < self._size:
                return None
            chunks = self._chunks
            # a frame larger than the receive buffer never gets its prefix back: a reader that needs the frame
            # without it (the API hooks) would copy it once more
            self.framed = False
            frame = bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)
            self._size = self._allocated = self._got = 0
            self._chunks = []
            self.partial = self._end > self._start
            return frame
        start: cython.Py_ssize_t = self._start
        avail: cython.Py_ssize_t = self._end - start
        if avail < 4:
            return None
        data: cython.p_uchar = self._buf  # compiled: the bytearray's own bytes (start + 4 <= end checked above)
        size: cython.longlong = (cython.cast(cython.longlong, data[start]) << 24) | (data[start + 1] << 16) \
            | (data[start + 2] << 8) | data[start + 3]
        if size >= 0x80000000:  # an int32
            size -= 0x100000000
        if size < 0 or size > limit:
            raise ConnectionClosed(f"Invalid receive (size = {size} larger than {limit}, {setting})")
        if avail >= 4 + size:
            stop: cython.Py_ssize_t = start + 4 + size
            self.framed = framed
            if not framed:
                start += 4
            # compiled: one bytes object made from the buffer's own bytes, no view between
            frame = data[start:stop] if cython.compiled else bytes(self._view[start:stop])
            if stop == self._end:
                self._start = self._end = 0
                self.partial = False
            else:
                self._start = stop
            return frame
        if 4 + size > len(self._buf) and 4 + size <= self._max:
            self._grow(4 + size)  # the frame fits the receive buffer once grown: no chunk, no pool memory
        elif 4 + size > len(self._buf):
            self._size = size  # too large for the receive buffer: assembled in chunks, the first one awaited
            self._start = start + 4
            if self._start == self._end:
                self._start = self._end = 0
        elif start:
            self._compact()
        return None

    @property
    def unreserved(self) -> int:
        """Bytes of the large frame not in a chunk yet."""
        return self._size - self._allocated

    def wants(self) -> cython.int:
        """The size of the chunk the large frame needs next (0: none needed now)."""
        if not self._size or self._got < self._allocated:
            return 0
        return min(self._size - self._allocated, max(FIRST_CHUNK, self._allocated))

    def grant(self, size: cython.int) -> None:
        """A chunk of ``size`` bytes for the large frame (its memory reserved by the caller)."""
        self._chunks.append(bytearray(size))
        self._allocated += size
        self._fill()

    def _fill(self) -> None:
        """Move bytes of the large frame that landed in the receive buffer into its chunk."""
        avail = self._end - self._start
        room = self._allocated - self._got
        if not avail or not room:
            return
        n = min(avail, room)
        chunk = self._chunks[-1]
        at = len(chunk) - room
        chunk[at:at + n] = self._view[self._start:self._start + n]
        self._got += n
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0

    def release(self) -> bool:
        """Shrink the receive buffer back to its initial size while it holds nothing (an idle connection); True
        when it did."""
        if self._size or self._end != self._start or len(self._buf) <= self._initial:
            return False
        self._buf = bytearray(self._initial)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        return True

    def _grow(self, need: cython.Py_ssize_t) -> None:
        """A receive buffer of at least ``need`` bytes (doubling, at most the capacity), its bytes moved to the
        front. A new buffer, not a resize: asyncio may still hold a view of the old one."""
        size: cython.Py_ssize_t = len(self._buf)
        while size < need:
            size *= 2
        if size > self._max:
            size = self._max
        avail = self._end - self._start
        buf = bytearray(size)
        buf[:avail] = self._view[self._start:self._end]
        self._buf = buf
        self._view = memoryview(buf)
        self._start, self._end = 0, avail

    def _compact(self) -> None:
        avail = self._end - self._start
        if self._start:
            self._buf[:avail] = bytes(self._view[self._start:self._end])
            self._start, self._end = 0, avail
