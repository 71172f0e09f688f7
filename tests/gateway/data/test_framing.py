"""FrameBuffer: Kafka frames cut from bytes that arrive in any pieces, large ones assembled in granted chunks; the
compiled form and its pure-Python twin alike."""

from __future__ import annotations

import random
import struct
from types import ModuleType

import pytest

from quotaflow.core.errors import ConnectionClosed
from quotaflow.gateway.data import framing
from quotaflow.gateway.data.framing import FIRST_CHUNK, RECEIVE_BUFFER, FrameBuffer
from twins import assert_compiled, forms

FORMS = forms(framing)


def test_make_setup_built_the_compiled_form() -> None:
    assert_compiled(framing)


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def receive(frames: FrameBuffer, data: bytes, rng: random.Random, granted: list[int], *,
            with_size: bool = False) -> list[bytes]:
    """Feed ``data`` as a socket would (pieces of random size, never more than the buffer offered), popping whole
    frames (``with_size``: asking for them with their size prefix) and granting every chunk asked for."""
    out: list[bytes] = []
    pos = 0
    while True:
        while True:
            frame = frames.pop(1 << 30, "socket.request.max.bytes", with_size)
            if frame is not None:
                body = frame[4:] if frames.framed else frame
                out.append(body)
                if frames.framed:
                    assert frame[:4] == framed(body)[:4]
                # with its size exactly when asked for and cut from the receive buffer (a frame that fits it)
                assert frames.framed == (with_size and len(body) + 4 <= RECEIVE_BUFFER)
                continue
            need = frames.wants()
            if not need:
                break
            granted.append(need)
            frames.grant(need)
        if pos == len(data):
            return out
        view = frames.buffer()
        n = min(len(view), len(data) - pos, rng.randint(1, 70_000))
        view[:n] = data[pos:pos + n]
        frames.updated(n)
        pos += n


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(8))
def test_frames_come_out_whole_and_in_order_whatever_the_pieces(form: ModuleType, seed: int) -> None:
    rng = random.Random(seed)
    bodies = [rng.randbytes(rng.choice([0, 1, 9, 100, 4000, 16_380, 16_381, 70_000, 300_000]))
              for _ in range(40)]
    frames, granted = form.FrameBuffer(), []
    assert receive(frames, b"".join(framed(b) for b in bodies), rng, granted) == bodies
    assert not frames.partial and not frames.large
    # only the frames larger than the receive buffer took chunks, exactly their size in all
    large = [len(b) for b in bodies if len(b) + 4 > 16 * 1024]
    assert sum(granted) == sum(large)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(4))
def test_frames_asked_for_with_their_size_come_with_it_unless_assembled_in_chunks(form: ModuleType,
                                                                                   seed: int) -> None:
    """``pop(..., framed=True)``: a frame cut from the receive buffer keeps its size prefix (the connection writes
    it on as one buffer); one larger than the buffer, assembled from chunks, comes without it and says so
    (``framed`` False): putting the prefix back would copy it, and its readers need it without."""
    rng = random.Random(seed)
    bodies = [rng.randbytes(rng.choice([0, 1, 9, 4000, 16_380, 16_381, 70_000])) for _ in range(40)]
    frames = form.FrameBuffer()
    assert receive(frames, b"".join(framed(b) for b in bodies), rng, [], with_size=True) == bodies


@pytest.mark.parametrize("form", FORMS)
def test_a_large_frame_holds_about_what_arrived_not_what_it_announced(form: ModuleType) -> None:
    frames = form.FrameBuffer()
    frames.feed(struct.pack(">i", 100 << 20) + b"x" * 16)
    assert frames.pop(1 << 30, "socket.request.max.bytes") is None
    assert frames.large and frames.wants() == FIRST_CHUNK  # the first chunk, not 100 MiB
    frames.grant(FIRST_CHUNK)
    assert frames.wants() == 0  # 16 bytes are in it; nothing more until they arrive


@pytest.mark.parametrize("form", FORMS)
def test_a_size_outside_the_limit_closes_with_kafkas_message(form: ModuleType) -> None:
    frames = form.FrameBuffer()
    frames.feed(struct.pack(">i", 600_000))
    with pytest.raises(ConnectionClosed, match=r"Invalid receive \(size = 600000 larger than 524288, sasl"):
        frames.pop(524_288, "sasl.server.max.receive.size")
    negative = form.FrameBuffer()
    negative.feed(struct.pack(">i", -1))
    with pytest.raises(ConnectionClosed):
        negative.pop(1 << 20, "socket.request.max.bytes")


# -- memory per idle connection (issue 37 item 2) ------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_the_buffer_starts_small_grows_to_fit_and_shrinks_when_idle(form: ModuleType) -> None:
    """A new buffer holds 1 KiB, not its capacity (the old upstream buffer held 64 KiB from the start); a frame
    that fits the capacity grows it to the frame's size (no chunk, no pool memory); emptied, ``release`` gives
    the memory back."""
    frames = form.FrameBuffer(64 * 1024)
    assert frames.capacity == form.INITIAL_BUFFER == 1024
    body = bytes(range(256)) * 40  # 10,240 bytes: larger than the initial buffer
    rng = random.Random(7)
    granted: list[int] = []
    assert receive(frames, framed(body) + framed(b"small"), rng, granted) == [body, b"small"]
    assert not granted  # it fitted the grown buffer: no chunk
    assert 10_244 <= frames.capacity <= 16 * 1024
    assert frames.release() and frames.capacity == 1024
    assert not frames.release()  # already small
    assert receive(frames, framed(b"again"), rng, granted) == [b"again"]


@pytest.mark.parametrize("form", FORMS)
def test_a_buffer_holding_a_partial_frame_is_not_released(form: ModuleType) -> None:
    frames = form.FrameBuffer()
    frames.feed(struct.pack(">i", 4000) + b"x" * 3000)
    assert frames.pop(1 << 20, "socket.request.max.bytes") is None
    grown = frames.capacity
    assert grown >= 4004 and not frames.release() and frames.capacity == grown
    frames.feed(b"y" * 1000)
    assert frames.pop(1 << 20, "socket.request.max.bytes") == b"x" * 3000 + b"y" * 1000
    assert frames.release() and frames.capacity == form.INITIAL_BUFFER


@pytest.mark.parametrize("form", FORMS)
def test_many_small_frames_in_one_read_grow_the_buffer_to_read_on(form: ModuleType) -> None:
    """Pipelined small frames that fill the buffer: it grows (up to its capacity) rather than offer no room."""
    frames = form.FrameBuffer(16 * 1024)
    view = frames.buffer()
    data = framed(b"a" * 508) * 2  # exactly 1 KiB of whole frames, not popped yet
    view[:len(data)] = data
    frames.updated(len(data))
    assert len(frames.buffer()) >= 1024 and frames.capacity == 2048
    assert frames.pop(1 << 20, "x") == b"a" * 508
