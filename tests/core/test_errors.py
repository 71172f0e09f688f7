"""Errors as types: every modelled Kafka error code maps to its class, others to UNKNOWN_SERVER_ERROR."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import quotaflow
from quotaflow.core import errors


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (31, errors.ClusterAuthorizationFailedError),
        (33, errors.UnsupportedSaslMechanismError),
        (34, errors.IllegalSaslStateError),
        (35, errors.UnsupportedVersionError),
        (42, errors.InvalidRequestError),
        (58, errors.SaslAuthenticationFailedError),
        (89, errors.ThrottlingQuotaExceededError),
        (12345, errors.UnknownServerError),
    ],
)
def test_for_code(code: int, cls: type[errors.KafkaError]) -> None:
    assert errors.for_code(code) is cls
    err = errors.ApiError(code, "boom").exception()
    assert isinstance(err, cls) and err.message == "boom"


def test_success_has_no_message() -> None:
    assert errors.SUCCESS.is_success and errors.SUCCESS.message is None and errors.SUCCESS.name == "NONE"


def _quotaflow_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a quotaflow module (``__main__`` modules are not imported: they run)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(quotaflow.__path__, "quotaflow."):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[obj.__name__] = obj
    return found


def test_every_error_is_in_the_tree() -> None:
    """Each error quotaflow defines derives from QuotaflowError, says why in its own docstring, and is drawn in
    core/errors.py's tree; the tree draws no class that does not exist."""
    found = _quotaflow_exceptions()
    drawn = set(re.findall(r"(?:├──|└──|^    )\s*(\w+Error|\w+Closed|QuotaflowError)\b", errors.__doc__ or "", re.M))
    assert {"QuotaflowError", "SaslAuthenticationError", "BrokerConnectionError"} <= set(found)
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, errors.QuotaflowError))
    assert not outside, f"not derived from QuotaflowError: {outside}"
    undocumented = sorted(name for name, cls in found.items() if not (cls.__dict__.get("__doc__") or "").strip())
    assert not undocumented, f"no docstring of its own: {undocumented}"
    assert set(found) == drawn, f"defined, not drawn: {sorted(set(found) - drawn)}; drawn, not defined: " \
        f"{sorted(drawn - set(found))}"


def test_map_errors_maps_the_first_match_and_chains() -> None:
    mapping = {OSError: errors.StoreError, Exception: errors.CommandError}
    with pytest.raises(errors.StoreError, match=r"^open q\.db: disk gone$") as info, errors.map_errors(
        mapping, "open q.db: "
    ):
        raise FileNotFoundError("disk gone")
    assert isinstance(info.value.__cause__, FileNotFoundError)
    with pytest.raises(errors.CommandError, match="bad"), errors.map_errors(mapping):
        raise KeyError("bad")


def test_map_errors_passes_quotaflow_and_unmapped_errors_through() -> None:
    original = errors.InvalidRequestError("already in the tree")
    with pytest.raises(errors.InvalidRequestError) as info, errors.map_errors({Exception: errors.StoreError}):
        raise original
    assert info.value is original
    with pytest.raises(ZeroDivisionError), errors.map_errors({OSError: errors.StoreError}):
        _ = 1 / 0
    with errors.map_errors({OSError: errors.StoreError}):
        pass  # nothing raised, nothing mapped


def test_map_errors_maps_within_the_tree_only_when_named() -> None:
    """The gateway's way to stop serving a connection on a bad request: InvalidRequestError -> ConnectionClosed."""
    with pytest.raises(errors.ConnectionClosed, match=r"^bad frame$") as info, errors.map_errors(
        {errors.InvalidRequestError: errors.ConnectionClosed, Exception: errors.StoreError}
    ):
        raise errors.InvalidRequestError("bad frame")
    assert isinstance(info.value.__cause__, errors.InvalidRequestError)
    with pytest.raises(errors.UnsupportedVersionError), errors.map_errors(
        {errors.InvalidRequestError: errors.ConnectionClosed, Exception: errors.StoreError}
    ):
        raise errors.UnsupportedVersionError()


def test_lower_layer_errors_are_mapped_where_they_are_called(tmp_path: Path) -> None:
    """A missing config file is a CommandError, an unreadable events file an EventsInputError, each with the
    cause chained."""
    from quotaflow.events import EventsInputError, read_dataset
    from quotaflow.gateway.config import read_properties

    with pytest.raises(errors.CommandError, match="cannot read config file") as info:
        read_properties(tmp_path / "missing.properties")
    assert isinstance(info.value.__cause__, FileNotFoundError)
    requests = tmp_path / "events" / "requests"
    requests.mkdir(parents=True)
    (requests / "part-0.parquet").write_bytes(b"not parquet")
    with pytest.raises(EventsInputError, match="cannot read"):
        read_dataset(tmp_path / "events", "requests")
