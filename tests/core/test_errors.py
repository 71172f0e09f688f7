"""Errors as types: every modelled Kafka error code maps to its class, others to UNKNOWN_SERVER_ERROR."""

from __future__ import annotations

import pytest

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
