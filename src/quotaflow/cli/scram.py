"""SCRAM credentials in ``quotaflow configs``, as ``kafka-configs.sh`` handles them (KIP-554).

``--add-config 'SCRAM-SHA-256=[iterations=8192,password=p],SCRAM-SHA-512=[password=p]'`` becomes one
AlterUserScramCredentials request (iterations default to 4096, kafka-configs' ``DefaultScramIterations``; the
salt is random and only the salted password travels, as Kafka's AdminClient sends it); ``--delete-config
SCRAM-SHA-512`` a deletion; ``--describe`` of users a DescribeUserScramCredentials request, printed as
``SCRAM credential configs for user-principal 'u' are SCRAM-SHA-256=iterations=8192``.

Against a store the request goes to :class:`~quotaflow.gateway.auth.scram_admin.ScramAdmin`, the code that answers
it at a gateway, so a store and a gateway validate alike and answer with the same Kafka errors; with
``--bootstrap-server`` it goes over the wire.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.api_key import ApiKey

from quotaflow.admin import Admin, AdminBackend
from quotaflow.core.errors import CommandError, ResourceNotFoundError, UnsupportedSaslMechanismError, for_code
from quotaflow.store.base import ScramStore
from quotaflow.store.scram import HASHES, MIN_ITERATIONS, SALT_BYTES

if TYPE_CHECKING:
    from quotaflow.admin.wire import WireAdmin

DEFAULT_ITERATIONS: Final = 4096  # kafka-configs' DefaultScramIterations (quotaflow users add defaults to 8192)
_CREDENTIAL: Final = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)
_INT_MAX: Final = 2**31 - 1


def is_scram(key: str) -> bool:
    """Kafka's ``ScramMechanism.isScram``: the config name is a SCRAM mechanism's name."""
    return key in HASHES


@dataclass(frozen=True, slots=True)
class Upsertion:
    mechanism: str
    iterations: int
    password: str


def _java_int(text: str) -> int:
    """Scala's ``String.toInt``: a NumberFormatException's message for what does not fit an int."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -_INT_MAX - 1 <= value <= _INT_MAX:
        raise CommandError(f'For input string: "{text}"')
    return value


def parse_upsertion(mechanism: str, text: str) -> Upsertion:
    """``[iterations=N,]password=P`` (brackets already dropped), with kafka-configs' messages. Unlike Kafka, a
    malformed value is not echoed whole: it may hold the password."""
    m = _CREDENTIAL.fullmatch(text)
    if m is None:
        shown = re.sub(r"password=.*", "password=[hidden]", text, flags=re.DOTALL)
        raise CommandError(f"Invalid credential property {mechanism.replace('-', '_')}={shown}")
    raw, password = m.group(1), m.group(2)
    iterations = DEFAULT_ITERATIONS if raw is None or raw == "-1" else _java_int(raw)
    if iterations < MIN_ITERATIONS:
        raise CommandError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for "
                           f"{mechanism}")
    return Upsertion(mechanism, iterations, password)


Exchange = Callable[[Any], Any]  # a KIP-554 request in, its response out


class ScramClient:
    """DescribeUserScramCredentials / AlterUserScramCredentials against the command's backend."""

    def __init__(self, backend: AdminBackend) -> None:
        self._describe: Exchange
        self._alter: Exchange
        if isinstance(backend, Admin):
            self._describe, self._alter = _store_exchanges(backend.store)
            self._versions = (0, 0)
        else:
            self._describe, self._alter, self._versions = _wire_exchanges(backend)  # type: ignore[arg-type]

    def describe_lines(self, users: Sequence[str]) -> list[str]:
        """kafka-configs' SCRAM lines for ``users`` (every user with a credential when empty); users without one
        are left out, as ``DescribeUserScramCredentialsResult.users`` leaves them out."""
        names = [DescribeUserScramCredentialsRequest.UserName(name=u) for u in dict.fromkeys(users)] or None
        response = self._describe(DescribeUserScramCredentialsRequest[self._versions[0]](users=names))
        if response.error_code:
            raise for_code(response.error_code)(response.error_message)
        lines = []
        for result in response.results:
            if result.error_code == ResourceNotFoundError.errno:
                continue
            if result.error_code:
                error = for_code(result.error_code)(result.error_message)
                lines.append(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': "
                             f"{type(error).__name__}: {error}")
                continue
            infos = ", ".join(f"{_MECHANISM_NAMES.get(i.mechanism, 'UNKNOWN')}=iterations={i.iterations}"
                              for i in result.credential_infos)
            lines.append(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
        return lines

    def alter(self, user: str, deletions: Sequence[str], upsertions: Sequence[Upsertion]) -> None:
        """One request for one user; its error, if any, raised as the Kafka error it is."""
        req = AlterUserScramCredentialsRequest
        request = req[self._versions[1]](
            deletions=[req.ScramCredentialDeletion(name=user, mechanism=_CODES[m]) for m in deletions],
            upsertions=[_upsertion(user, u) for u in upsertions])
        response = self._alter(request)
        for result in response.results:
            if result.error_code:
                raise for_code(result.error_code)(result.error_message)


_CODES: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # KIP-554's mechanism bytes
_MECHANISM_NAMES: Final = {code: name for name, code in _CODES.items()}


def _upsertion(user: str, u: Upsertion) -> Any:
    """What Kafka's AdminClient sends: a random salt and ``Hi(password, salt, iterations)``, never the password."""
    salt = os.urandom(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac(HASHES[u.mechanism], u.password.encode("utf-8"), salt, u.iterations)
    return AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user, mechanism=_CODES[u.mechanism], iterations=u.iterations, salt=salt, salted_password=salted)


def _store_exchanges(store: object) -> tuple[Exchange, Exchange]:
    """The gateway's own KIP-554 handler over the store (the command's user is the store's administrator)."""
    from quotaflow.gateway.auth.scram_admin import ScramAdmin

    if not isinstance(store, ScramStore):
        def nobody(_request: Any) -> Any:
            return DescribeUserScramCredentialsResponse[0](error_code=0, error_message=None, results=[])

        def refuse(_request: Any) -> Any:
            raise UnsupportedSaslMechanismError("this store keeps PLAIN credentials only, not SCRAM-SHA-256, "
                                                "SCRAM-SHA-512")
        return nobody, refuse
    admin = ScramAdmin(store)
    return (lambda r: admin.describe(0, r, True)), (lambda r: admin.alter(0, r, True))


def _wire_exchanges(wire: WireAdmin) -> tuple[Exchange, Exchange, tuple[int, int]]:
    conn = wire.conn
    versions = (conn.version_for(ApiKey.DescribeUserScramCredentials,
                                 int(DescribeUserScramCredentialsRequest.max_version)),
                conn.version_for(ApiKey.AlterUserScramCredentials, int(AlterUserScramCredentialsRequest.max_version)))
    return conn.send, conn.send, versions
