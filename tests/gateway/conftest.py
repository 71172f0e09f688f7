"""Real parts for the gateway proof: one tansu broker per session (loopback, memory storage), free ports."""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Iterator

import pytest


def _preload_kafka_protocol() -> None:
    """kafka-python 3.0.12 loads its JSON schemas with the deprecated ``importlib.resources.read_text``; the
    warning fires once per module at import, and pytest runs with ``filterwarnings = error``. Import them here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.protocol

        for mod in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
            importlib.import_module(mod.name)


_preload_kafka_protocol()

from quotaflow.tansu import Tansu, free_port  # noqa: E402  (after the preload on purpose)


@pytest.fixture(scope="session")
def tansu() -> Iterator[Tansu]:
    """The session's upstream broker. Tests that restart it must use their own :class:`Tansu` instead."""
    with Tansu() as broker:
        yield broker


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
