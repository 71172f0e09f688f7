# The typed interface of frame_facts.py (its source is Cython's pure-Python dialect, which mypy does not read).
from typing import Final

COMPILED: Final[bool]
ACKS_UNREADABLE: Final[int]

def read_request(
    frame: bytes, flexible_from: bytes
) -> tuple[int, int, int, str | None, int, int, int]: ...
def correlation_id(frame: bytes) -> int: ...
