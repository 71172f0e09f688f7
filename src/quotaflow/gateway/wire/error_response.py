"""Responses the gateway builds in a broker's place, field for field as Kafka builds them.

A refusal made here must be the bytes Kafka's ``getErrorResponse`` (or ``KafkaApis``' own refusal) would send:
clients parse them with less tolerance than kafka-python does (librdkafka drops a Fetch response whose refused
partition carries null records as a protocol parse failure and re-sends it at once, thousands of times a second).
Two rules build every such response, so a builder names only what Kafka's code sets explicitly:

* a field Kafka's error path leaves alone keeps its message definition's default. kafka-python's generated classes
  read the same JSON definitions and take the same defaults as Kafka's generated Java classes (``-1`` where the
  schema says ``"default": "-1"``, ``""`` for a string without a default, null where the default is ``"null"``, an
  empty array, an empty struct), with one difference that only helps: a ``records`` field defaults to empty bytes
  here and to null in Java, and Kafka's fetch path replaces null records with ``MemoryRecords.EMPTY`` before it
  writes them. So :func:`message` and :func:`element` never pass a default on;
* an error message is what ``ApiError.fromThrowable`` makes of an error raised without a message: null (a
  :class:`quotaflow.core.errors.KafkaError` made without a message has ``message`` None); Kafka's code that calls
  ``Errors.message()`` instead sends the error's generic text (``KafkaError.description``).
"""

from __future__ import annotations

from typing import Any

from quotaflow.gateway.wire import protocol


def _known(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    fields = cls._struct.fields
    return {k: v for k, v in values.items() if k in fields}


def message(api_key: int, version: int, **values: Any) -> Any:
    """The response of ``api_key`` at ``version`` with ``values`` (the ones this version has) and the schema's
    defaults for every other field."""
    cls = protocol.response_class(api_key, version)
    return cls(**_known(cls, values))


def element_class(owner: Any, field: str) -> Any:
    """The class of the elements of ``owner``'s array (or struct) field ``field``."""
    return owner._struct.fields[field].data_class


def element(owner: Any, field: str, **values: Any) -> Any:
    """An element of ``owner``'s array ``field`` with ``values`` (the ones its version has) and the schema's
    defaults for the rest."""
    cls = element_class(owner, field)
    return cls(**_known(cls, values))
