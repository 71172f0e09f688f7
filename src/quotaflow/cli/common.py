"""Shared CLI plumbing: where the quotas live (``--store`` / ``--bootstrap-server``) and Kafka-style errors.

Commands talk to an :class:`~quotaflow.admin.AdminBackend`. :func:`open_backend` builds the store-backed
:class:`~quotaflow.admin.Admin`, or, given ``--bootstrap-server``, the wire client
:class:`~quotaflow.admin.wire.WireAdmin` (:func:`open_wire_backend`) so the same commands manage quotas through a
gateway.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, NoReturn, TypeVar

import click

from quotaflow.admin import Admin, AdminBackend
from quotaflow.core.errors import BrokerConnectionError, CommandError, KafkaError, QuotaflowError, StoreError
from quotaflow.core.javafmt import parse_double
from quotaflow.store import open_store
from quotaflow.store.factory import STORE_ENV, describe_store, stderr_notice

if TYPE_CHECKING:
    from quotaflow.admin.wire import WireAdmin
    from quotaflow.store.kafka import KafkaStore
    from quotaflow.store.sqlite import SqliteStore

F = TypeVar("F", bound=Callable[..., object])


# Kafka's Java exception for each error code, so messages read as kafka-configs.sh prints them
_JAVA_EXCEPTIONS: Final = {
    -1: "org.apache.kafka.common.errors.UnknownServerException",
    31: "org.apache.kafka.common.errors.ClusterAuthorizationException",
    33: "org.apache.kafka.common.errors.UnsupportedSaslMechanismException",
    35: "org.apache.kafka.common.errors.UnsupportedVersionException",
    40: "org.apache.kafka.common.errors.InvalidConfigurationException",
    42: "org.apache.kafka.common.errors.InvalidRequestException",
    58: "org.apache.kafka.common.errors.SaslAuthenticationException",
    89: "org.apache.kafka.common.errors.ThrottlingQuotaExceededException",
    91: "org.apache.kafka.common.errors.ResourceNotFoundException",
    92: "org.apache.kafka.common.errors.DuplicateResourceException",
    93: "org.apache.kafka.common.errors.UnacceptableCredentialException",
}


STORE_HELP: Final = ("Quota store: a SQLite file (PATH or sqlite:///PATH) or a topic in a Kafka cluster "
                      "(kafka://HOST:PORT[,HOST:PORT...][/TOPIC]); default $QUOTAFLOW_STORE, else ./quotaflow.db.")


def store_option(f: F) -> F:
    """``--store PATH|URL`` (else ``$QUOTAFLOW_STORE``, else ``./quotaflow.db``)."""
    return click.option("--store", "store", metavar="PATH|URL", default=None, help=STORE_HELP)(f)


def bootstrap_option(f: F) -> F:
    """``--bootstrap-server HOST:PORT``: manage quotas through a quotaflow gateway instead of a store file."""
    f = click.option(
        "--command-config",
        metavar="FILE",
        default=None,
        expose_value=False,
        callback=lambda ctx, _param, value: ctx.meta.__setitem__("quotaflow.command_config", value),
        help="With --bootstrap-server: client properties (security.protocol=SASL_PLAINTEXT, sasl.mechanism=PLAIN, "
        "sasl.jaas.config=..., quotaflow.http.url=http://HOST:PORT for --resolve). See docs/gateway-testing.md.",
    )(f)
    return click.option(
        "--bootstrap-server",
        "bootstrap_server",
        metavar="HOST:PORT",
        default=None,
        help="Talk to a quotaflow gateway instead of opening the store file.",
    )(f)


COMMAND_CONFIG_META: Final = "quotaflow.command_config"  # read by open_wire_backend
COMMAND_CONFIG_ENV: Final = "QUOTAFLOW_COMMAND_CONFIG"


def set_command_config(path: str) -> None:
    """Where ``--command-config`` leaves its value for :func:`open_wire_backend` (configs parses args by hand)."""
    click.get_current_context().meta[COMMAND_CONFIG_META] = path


def _command_config_path() -> str | None:
    """``--command-config FILE`` of the running command (``configs`` takes ``$QUOTAFLOW_COMMAND_CONFIG`` only)."""
    ctx = click.get_current_context(silent=True)
    path = None if ctx is None else ctx.meta.get(COMMAND_CONFIG_META)
    return path or os.environ.get(COMMAND_CONFIG_ENV) or None


def open_wire_backend(bootstrap: str) -> WireAdmin:
    """The ``--bootstrap-server`` backend, configured from the ``--command-config`` client properties."""
    from quotaflow.admin.wire import from_properties  # kafka-python only when a command talks to a gateway
    from quotaflow.gateway.config import read_properties

    path = _command_config_path()
    return from_properties(bootstrap, read_properties(path) if path else {})


def announce_store(store: str | None) -> None:
    """The one rule of every command that may write the store (configs, client-quotas, acls, users): when the
    command line did not name the store, say on stderr which one it is, so a write never lands unseen in a
    ``./quotaflow.db`` no gateway reads. Silent with ``--store``; stdout stays Kafka's lines."""
    if store is not None:
        return
    where = describe_store(None)
    if os.environ.get(STORE_ENV):
        click.echo(f"Using the quota store {where} (from ${STORE_ENV})", err=True)
    else:
        click.echo(f"Using the quota store {where} (the default: no --store given and ${STORE_ENV} is not set)",
                   err=True)


def open_backend(store: str | None, bootstrap_server: str | None = None, *, create: bool = True) -> AdminBackend:
    """The backend the command runs against; ``create=False`` (describe, resolve) refuses a missing store file,
    ``create=True`` (a command that writes) names the store when the command line did not
    (:func:`announce_store`)."""
    if bootstrap_server is not None:
        if store is not None:
            raise CommandError("--store and --bootstrap-server cannot be used together")
        return open_wire_backend(bootstrap_server)
    backend = Admin(open_cli_store(store, create=create))
    if create:
        announce_store(store)
    return backend


def open_cli_store(store: str | None, *, create: bool = True) -> SqliteStore | KafkaStore:
    """A command's ``--store``: a slow Kafka store says what it waits for on stderr, and a Kafka store's reader
    starts from its newest checkpoint (a command needs the current state, not the history)."""
    return open_store(store, create=create, notice=stderr_notice, from_checkpoint=True)




def java_exception_line(error: QuotaflowError) -> str:
    """``<java exception class>: <message>`` as Kafka's tools print a failure."""
    if isinstance(error, KafkaError):
        name = _JAVA_EXCEPTIONS.get(error.errno, _JAVA_EXCEPTIONS[-1])
        return f"{name}: {error}"
    if isinstance(error, CommandError):
        return f"java.lang.IllegalArgumentException: {error}"
    return f"{type(error).__name__}: {error}"


def fail(tool: str, args: Sequence[str], error: QuotaflowError) -> NoReturn:
    """Print the Kafka-style failure on stderr and exit 1."""
    click.echo(f"Error while executing {tool} command with args '{shlex.join(args)}'", err=True)
    click.echo(java_exception_line(error), err=True)
    sys.exit(1)


@contextmanager
def kafka_errors(tool: str, args: Sequence[str]) -> Iterator[None]:
    """Turn quotaflow errors raised inside the block into a Kafka-style failure (stderr, exit status 1)."""
    try:
        yield
    except StoreError as e:
        store_failure(e)
    except (KafkaError, CommandError, BrokerConnectionError) as e:
        fail(tool, args, e)


def store_failure(error: StoreError) -> NoReturn:
    """A store that cannot be opened, read or written: one line on stderr, exit status 1."""
    click.echo(f"Error: {error}", err=True)
    sys.exit(1)


class RawArgsCommand(click.Command):
    """A click command that remembers its raw arguments, for the error header (``args.mkString`` in Kafka)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["quotaflow.raw_args"] = list(args)
        return super().parse_args(ctx, args)


def raw_args() -> list[str]:
    ctx = click.get_current_context()
    return list(ctx.meta.get("quotaflow.raw_args", []))


def parse_java_double(key: str, text: str) -> float:
    """``Double.parseDouble``, with kafka-configs.sh's message when it fails."""
    try:
        return parse_double(text)
    except ValueError:
        raise CommandError(f"Cannot parse quota configuration value for {key}: {text}") from None
