# The typed interface of frame_facts.py (its source is Cython's pure-Python dialect, which mypy does not read).
from typing import Final, TypeVar

_H = TypeVar("_H", bound=tuple[int, int, int, str | None, int, int])

COMPILED: Final[bool]
ACKS_UNREADABLE: Final[int]

def read_request(frame: bytes, flexible_from: bytes, header: type[_H] = ...) -> tuple[_H, int]: ...
def correlation_id(frame: bytes) -> int: ...
