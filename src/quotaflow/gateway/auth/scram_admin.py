"""KIP-554 at the gateway: DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) in terminate mode.

The users are the gateway's own: the SCRAM credentials in its store, the ones it authenticates clients with (a
``kafka://`` store shares them with the fleet, applied like quotas). Forwarding these APIs would manage the
upstream's users with the gateway's identity; in SASL passthrough they do go upstream (the upstream authenticates).

Authorization as KafkaApis: DESCRIBE / ALTER on the CLUSTER (with the gateway's authorizer; without one only the
admin principals, Kafka's super users). Validation and messages as Kafka's: mechanism 1 = SCRAM-SHA-256,
2 = SCRAM-SHA-512 (else UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism"), iterations 4096..16384
(UNACCEPTABLE_CREDENTIAL "Too few iterations" / "Too many iterations"), an empty user name, one user named twice in
a request (DUPLICATE_RESOURCE), deleting or describing a credential that does not exist (RESOURCE_NOT_FOUND). The
client sends ``SaltedPassword`` (PBKDF2 already applied); the gateway derives and keeps StoredKey and ServerKey
only, as Kafka's ``ScramCredential``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final, Protocol

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ClusterAuthorizationFailedError
from quotaflow.gateway.wire.protocol import response_class
from quotaflow.store.base import ScramCredential
from quotaflow.store.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_SHA_256, SCRAM_SHA_512, digest, hmac_digest

MECHANISMS: Final = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
CODES: Final = {name: code for code, name in MECHANISMS.items()}

NONE: Final = 0
UNSUPPORTED_SASL_MECHANISM: Final = 33
RESOURCE_NOT_FOUND: Final = 91
DUPLICATE_RESOURCE: Final = 92
UNACCEPTABLE_CREDENTIAL: Final = 93


class CredentialStore(Protocol):
    def put_scram_credential(self, credential: ScramCredential) -> None: ...
    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...
    def delete_scram_credential(self, user: str, mechanism: str) -> bool: ...
    def list_credentials(self) -> list[str]: ...


class ScramAdmin:
    """Describe and alter the store's SCRAM credentials (blocking: run it off the event loop)."""

    def __init__(self, store: CredentialStore) -> None:
        self.store = store

    def _infos(self, user: str) -> list[tuple[int, int]]:
        found = []
        for code, mechanism in MECHANISMS.items():
            credential = self.store.get_scram_credential(user, mechanism)
            if credential is not None:
                found.append((code, credential.iterations))
        return found

    def describe(self, version: int, request: Any, allowed: bool) -> Any:
        cls = response_class(ApiKey.DescribeUserScramCredentials, version)
        result = cls.DescribeUserScramCredentialsResult
        if not allowed:
            # Kafka's getErrorResponse: the error at the top and once per named user (the user name left at its
            # default, ""), the messages ApiError.fromThrowable's: null for the generic error. librdkafka (up to
            # 2.16 at least) aborts on any top-level error here: see docs/security.md
            e = ClusterAuthorizationFailedError()
            return cls(error_code=e.errno, error_message=e.message, results=[
                result(error_code=e.errno, error_message=e.message) for _ in request.users or []])
        info = result.CredentialInfo
        results = []
        if not request.users:  # null or empty: every user with a SCRAM credential
            for user in self.store.list_credentials():
                infos = self._infos(user)
                if infos:
                    results.append(result(user=user, error_code=NONE, error_message=None,
                                          credential_infos=[info(mechanism=m, iterations=i) for m, i in infos]))
            return cls(error_code=NONE, error_message=None, results=results)
        names = [u.name for u in request.users]
        for user in dict.fromkeys(names):
            if names.count(user) > 1:
                results.append(result(user=user, error_code=DUPLICATE_RESOURCE, credential_infos=[], error_message=(
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}")))
                continue
            infos = self._infos(user)
            if not infos:
                results.append(result(user=user, error_code=RESOURCE_NOT_FOUND, credential_infos=[],
                                      error_message=f"Attempt to describe a user credential that does not exist: "
                                                    f"{user}"))
                continue
            results.append(result(user=user, error_code=NONE, error_message=None,
                                  credential_infos=[info(mechanism=m, iterations=i) for m, i in infos]))
        return cls(error_code=NONE, error_message=None, results=results)

    def alter(self, version: int, request: Any, allowed: bool) -> Any:
        cls = response_class(ApiKey.AlterUserScramCredentials, version)
        result = cls.AlterUserScramCredentialsResult
        users = list(dict.fromkeys([d.name for d in request.deletions or []] +
                                   [u.name for u in request.upsertions or []]))
        if not allowed:
            # getErrorResponse: every user named once, sorted, with ApiError.fromThrowable's (null) message
            e = ClusterAuthorizationFailedError()
            return cls(results=[result(user=u, error_code=e.errno, error_message=e.message) for u in sorted(users)])
        errors: dict[str, tuple[int, str]] = {}
        seen: dict[tuple[str, int], int] = {}
        for item in [*(request.deletions or []), *(request.upsertions or [])]:
            seen[(item.name, int(item.mechanism))] = seen.get((item.name, int(item.mechanism)), 0) + 1
        for (user, _m), n in seen.items():
            if n > 1:
                errors.setdefault(user, (DUPLICATE_RESOURCE,
                                         "A user credential cannot be altered twice in the same request"))
        for d in request.deletions or []:
            errors.setdefault(d.name, self._invalid(d.name, int(d.mechanism)) or (NONE, ""))
        for u in request.upsertions or []:
            problem = self._invalid(u.name, int(u.mechanism))
            if problem is None and u.iterations < MIN_ITERATIONS:
                problem = (UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif problem is None and u.iterations > MAX_ITERATIONS:
                problem = (UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            elif problem is None and (not u.salt or not u.salted_password):
                problem = (UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
            if problem is not None and errors.get(u.name, (NONE, ""))[0] == NONE:
                errors[u.name] = problem
        for d in request.deletions or []:
            mechanism = MECHANISMS.get(int(d.mechanism))
            if errors.get(d.name, (NONE, ""))[0] == NONE and mechanism is not None \
                    and self.store.get_scram_credential(d.name, mechanism) is None:
                errors[d.name] = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        # a user's alterations are applied only when every one of them is valid (Kafka: per user, all or nothing)
        for d in request.deletions or []:
            if errors.get(d.name, (NONE, ""))[0] == NONE:
                self.store.delete_scram_credential(d.name, MECHANISMS[int(d.mechanism)])
        for u in request.upsertions or []:
            if errors.get(u.name, (NONE, ""))[0] == NONE:
                self.store.put_scram_credential(derive(u.name, MECHANISMS[int(u.mechanism)], bytes(u.salt),
                                                       bytes(u.salted_password), int(u.iterations)))
        return cls(results=[result(user=u, error_code=errors.get(u, (NONE, ""))[0],
                                   error_message=errors.get(u, (NONE, ""))[1] or None) for u in users])

    @staticmethod
    def _invalid(user: str, mechanism: int) -> tuple[int, str] | None:
        if not user:
            return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
        if mechanism not in MECHANISMS:
            return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
        return None


def derive(user: str, mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """Kafka's ``ScramCredential`` from a KIP-554 upsertion: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key")."""
    client_key = hmac_digest(mechanism, salted_password, b"Client Key")
    return ScramCredential(user=user, mechanism=mechanism, salt=salt, stored_key=digest(mechanism, client_key),
                           server_key=hmac_digest(mechanism, salted_password, b"Server Key"), iterations=iterations)


async def handle(admin: ScramAdmin | None, api_key: int, version: int, request: Any,
                 allowed: bool) -> tuple[Any, int]:
    """The response for a decoded 50/51 request and the executor thread time it took. ``admin`` None: the store
    keeps no SCRAM credentials (nothing described; every alteration UNSUPPORTED_SASL_MECHANISM). ``allowed``:
    DESCRIBE / ALTER on the cluster (``authorize.cluster_allowed``, super users only without an authorizer)."""
    ok = allowed

    def run() -> tuple[Any, int]:
        start = time.thread_time_ns()
        if api_key == ApiKey.DescribeUserScramCredentials:
            response = (admin or ScramAdmin(_NoScram())).describe(version, request, ok)
        elif admin is not None:
            response = admin.alter(version, request, ok)
        else:
            cls = response_class(ApiKey.AlterUserScramCredentials, version)
            users = dict.fromkeys([i.name for i in [*(request.deletions or []), *(request.upsertions or [])]])
            response = cls(results=[cls.AlterUserScramCredentialsResult(
                user=u, error_code=UNSUPPORTED_SASL_MECHANISM,
                error_message="This gateway's store keeps no SCRAM credentials") for u in users])
        return response, time.thread_time_ns() - start

    return await asyncio.get_running_loop().run_in_executor(None, run)


class _NoScram:
    """A store without SCRAM credentials, for describing: nobody has one."""

    def put_scram_credential(self, credential: ScramCredential) -> None:  # pragma: no cover - never called
        raise TypeError("this store keeps no SCRAM credentials")

    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return None

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        return False

    def list_credentials(self) -> list[str]:
        return []
