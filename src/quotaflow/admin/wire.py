"""A small Kafka admin client over the wire: the ``--bootstrap-server`` backend of ``configs`` and ``client-quotas``.

It speaks to a quotaflow gateway (or any broker that serves DescribeClientQuotas 48 / AlterClientQuotas 49) with
kafka-python 3.0.12's message classes over one blocking socket: ApiVersions first (KIP-511 fallback when the broker
rejects our version), optional SASL/PLAIN (SaslHandshake v1 + SaslAuthenticate), then 48/49 at the highest version
both sides support. A response's ``throttle_time_ms`` is honoured the KIP-219 way: nothing more is sent on the
connection until the throttle time has passed. Error codes become :mod:`quotaflow.core.errors` types.

Resolve has no Kafka API key; the gateway serves it as JSON at ``GET /resolve`` on its HTTP endpoint, which this
client calls when given ``http_url``.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from quotaflow import __version__
from quotaflow.admin.codec import resolution_from_json
from quotaflow.admin.local import Alteration, AlterResult, DescribedEntity, Resolution
from quotaflow.core.addresses import parse_host_port
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import (
    ApiError,
    BrokerConnectionError,
    CommandError,
    InvalidRequestError,
    KafkaError,
    UnsupportedVersionError,
    for_code,
    map_errors,
)
from quotaflow.core.filters import QuotaFilter

API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
PLAIN: Final = "PLAIN"
DEFAULT_TIMEOUT_S: Final = 30.0

# --command-config properties (Kafka's client names where Kafka has one)
SECURITY_PROTOCOL: Final = "security.protocol"
SASL_MECHANISM: Final = "sasl.mechanism"
SASL_JAAS_CONFIG: Final = "sasl.jaas.config"
SASL_USERNAME: Final = "sasl.username"  # librdkafka's spelling, accepted as an alternative to the JAAS line
SASL_PASSWORD: Final = "sasl.password"
REQUEST_TIMEOUT_MS: Final = "request.timeout.ms"
HTTP_URL: Final = "quotaflow.http.url"  # the gateway's HTTP endpoint, for --resolve
_JAAS_OPTION: Final = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def error_for(code: int, message: str | None) -> KafkaError:
    """The quotaflow error type for a Kafka error code, carrying the broker's message."""
    return for_code(code)(message)


@dataclass(frozen=True, slots=True)
class SaslPlain:
    """SASL/PLAIN credentials (``security.protocol=SASL_PLAINTEXT``, ``sasl.mechanism=PLAIN``)."""

    username: str
    password: str

    def message(self) -> bytes:
        return b"\x00" + self.username.encode() + b"\x00" + self.password.encode()


def parse_bootstrap(text: str) -> tuple[str, int]:
    """The first ``HOST:PORT`` of a comma-separated bootstrap list."""
    try:
        return parse_host_port(text.split(",")[0])
    except ValueError:
        raise CommandError(f"--bootstrap-server expects HOST:PORT, got {text!r}") from None


class KafkaWireConnection:
    """One blocking connection: ApiVersions-negotiated, optionally SASL/PLAIN-authenticated, throttle-aware."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        sasl: SaslPlain | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        client_id: str = "quotaflow-admin",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._sleep = sleep
        self._protocol = KafkaProtocol(client_id=client_id)
        self._blocked_until = 0.0
        self.throttled_ms_total = 0
        with map_errors({OSError: BrokerConnectionError}, f"cannot connect to {host}:{port}: "):
            self._sock = socket.create_connection((host, port), timeout=timeout)
        try:
            self.versions = self._negotiate()
            if sasl is not None:
                self._authenticate(sasl)
        except BaseException:
            self.close()
            raise

    # -- plumbing -----------------------------------------------------------------------------------------------
    def send(self, request: Any) -> Any:
        """Send one request and return its decoded response, after any throttle back-off the broker asked for."""
        wait = self._blocked_until - time.monotonic()
        if wait > 0:
            self._sleep(wait)
        where = f"{self.host}:{self.port}"
        with (
            map_errors({Exception: BrokerConnectionError}, f"bad response from {where}: "),  # kafka-python's decode
            map_errors({OSError: BrokerConnectionError}, f"{where}: "),
        ):
            self._protocol.send_request(request)
            self._sock.sendall(self._protocol.send_bytes())
            deadline = time.monotonic() + self.timeout
            while True:
                if time.monotonic() > deadline:
                    raise BrokerConnectionError(f"no response from {where} in {self.timeout}s")
                data = self._sock.recv(1 << 16)
                if not data:
                    raise BrokerConnectionError(f"{where} closed the connection")
                responses = self._protocol.receive_bytes(data)
                if responses:
                    response = responses[0][1]
                    break
        throttle_ms = int(getattr(response, "throttle_time_ms", 0) or 0)
        if throttle_ms > 0:
            self.throttled_ms_total += throttle_ms
            self._blocked_until = time.monotonic() + throttle_ms / 1000
        return response

    def version_for(self, api_key: int, ours: int) -> int:
        """The highest version of ``api_key`` both sides speak, else UnsupportedVersionError."""
        theirs = self.versions.get(api_key)
        if theirs is None or theirs[0] > ours:
            raise UnsupportedVersionError(f"The broker at {self.host}:{self.port} does not support API key {api_key}")
        return min(ours, theirs[1])

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        version = int(ApiVersionsRequest.max_version)
        request = ApiVersionsRequest[version](client_software_name="quotaflow", client_software_version=__version__)
        response = self.send(request)
        if response.error_code == UnsupportedVersionError.errno:
            # KIP-511: the broker answered with a v0 body listing its ApiVersions range; retry at its max
            ranges = {int(k.api_key): int(k.max_version) for k in response.api_keys}
            version = min(version, ranges.get(API_VERSIONS, 0))
            response = self.send(ApiVersionsRequest[version]())
        if response.error_code != 0:
            raise error_for(response.error_code, None)
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    def _authenticate(self, sasl: SaslPlain) -> None:
        handshake = self.send(SaslHandshakeRequest[self.version_for(SASL_HANDSHAKE, 1)](mechanism=PLAIN))
        if handshake.error_code != 0:
            raise error_for(handshake.error_code, f"SASL mechanism {PLAIN} refused; enabled: {handshake.mechanisms}")
        version = self.version_for(SASL_AUTHENTICATE, int(SaslAuthenticateRequest.max_version))
        answer = self.send(SaslAuthenticateRequest[version](auth_bytes=sasl.message()))
        if answer.error_code != 0:
            raise error_for(answer.error_code, answer.error_message)

    def close(self) -> None:
        self._sock.close()


class WireAdmin:
    """:class:`quotaflow.admin.AdminBackend` over the Kafka protocol (and the gateway's HTTP ``/resolve``)."""

    protocol_name: ClassVar[str] = "wire"

    def __init__(
        self,
        bootstrap: str,
        *,
        sasl: SaslPlain | None = None,
        http_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        host, port = parse_bootstrap(bootstrap)
        self.http_url = http_url.rstrip("/") if http_url else None
        self.timeout = timeout
        self.conn = KafkaWireConnection(host, port, sasl=sasl, timeout=timeout)

    def describe(self, quota_filter: QuotaFilter) -> list[DescribedEntity]:
        version = self.conn.version_for(DESCRIBE_CLIENT_QUOTAS, int(DescribeClientQuotasRequest.max_version))
        cls = DescribeClientQuotasRequest[version]
        request = cls(
            components=[
                cls.ComponentData(entity_type=c.entity_type, match_type=int(c.match_type), match=c.match)
                for c in quota_filter.components
            ],
            strict=quota_filter.strict,
        )
        response = self.conn.send(request)
        if response.error_code != 0:
            raise error_for(response.error_code, response.error_message)
        out: list[DescribedEntity] = []
        for entry in response.entries or []:
            entity = QuotaEntity.from_wire({e.entity_type: e.entity_name for e in entry.entity})
            out.append(DescribedEntity(entity, {v.key: float(v.value) for v in entry.values}))
        return out

    def alter(self, alterations: Sequence[Alteration], validate_only: bool = False) -> list[AlterResult]:
        version = self.conn.version_for(ALTER_CLIENT_QUOTAS, int(AlterClientQuotasRequest.max_version))
        cls = AlterClientQuotasRequest[version]
        entries = []
        for a in alterations:
            if None in a.entity:
                raise InvalidRequestError("An entity type cannot be null on the wire")
            entries.append(
                cls.EntryData(
                    entity=[cls.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in a.entity.items()],
                    ops=[
                        cls.EntryData.OpData(key=op.key, value=0.0 if op.value is None else op.value, remove=op.remove)
                        for op in a.ops
                    ],
                )
            )
        response = self.conn.send(cls(entries=entries, validate_only=validate_only))
        return [
            AlterResult(
                {e.entity_type: e.entity_name for e in entry.entity},
                ApiError(int(entry.error_code), entry.error_message),
            )
            for entry in response.entries
        ]

    def resolve(self, user: str, client_id: str) -> Resolution:
        return self._resolution(self._get_json("/resolve", {"user": user, "client-id": client_id}))

    def resolve_ip(self, ip: str) -> Resolution:
        return self._resolution(self._get_json("/resolve", {"ip": ip}))

    @staticmethod
    def _resolution(doc: Any) -> Resolution:
        with map_errors({KeyError: BrokerConnectionError, TypeError: BrokerConnectionError,
                         ValueError: BrokerConnectionError}, "unexpected /resolve document: "):
            return resolution_from_json(doc)

    def _get_json(self, path: str, query: Mapping[str, str]) -> Any:
        if self.http_url is None:
            raise CommandError(
                f"--resolve with --bootstrap-server needs the gateway's HTTP endpoint: set {HTTP_URL}=http://HOST:PORT "
                "(the gateway's --metrics-port) in the --command-config file"
            )
        url = f"{self.http_url}{path}?{urllib.parse.urlencode(query)}"
        with map_errors({OSError: BrokerConnectionError, ValueError: BrokerConnectionError}, f"GET {url}: "):
            try:
                with urllib.request.urlopen(url, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                raise BrokerConnectionError(f"GET {url}: HTTP {e.code}: {e.read().decode(errors='replace')}") from e

    def close(self) -> None:
        self.conn.close()


# -- --command-config ------------------------------------------------------------------------------------------


def jaas_options(config: str) -> dict[str, str]:
    """The ``key="value"`` options of a ``sasl.jaas.config`` line (``username``, ``password``, ...)."""
    return {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(config)}


def sasl_from_properties(props: Mapping[str, str]) -> SaslPlain | None:
    """PLAINTEXT (no SASL) or SASL_PLAINTEXT with PLAIN, from Kafka client properties."""
    protocol = props.get(SECURITY_PROTOCOL, "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol != "SASL_PLAINTEXT":
        raise CommandError(f"{SECURITY_PROTOCOL}={protocol} is not supported (PLAINTEXT or SASL_PLAINTEXT)")
    mechanism = props.get(SASL_MECHANISM, "GSSAPI").upper()
    if mechanism != PLAIN:
        raise CommandError(f"{SASL_MECHANISM}={mechanism} is not supported (the gateway terminates PLAIN)")
    username, password = props.get(SASL_USERNAME), props.get(SASL_PASSWORD)
    if SASL_JAAS_CONFIG in props:
        options = jaas_options(props[SASL_JAAS_CONFIG])
        username, password = options.get("username", username), options.get("password", password)
    if not username or password is None:
        raise CommandError(f"SASL/PLAIN needs a username and password in {SASL_JAAS_CONFIG} or {SASL_USERNAME}")
    return SaslPlain(username, password)


def from_properties(bootstrap: str, props: Mapping[str, str]) -> WireAdmin:
    """A :class:`WireAdmin` configured from ``--command-config`` properties."""
    timeout = DEFAULT_TIMEOUT_S
    if REQUEST_TIMEOUT_MS in props:
        try:
            timeout = int(props[REQUEST_TIMEOUT_MS]) / 1000
        except ValueError as e:
            raise CommandError(f"{REQUEST_TIMEOUT_MS} must be a number of milliseconds") from e
    return WireAdmin(bootstrap, sasl=sasl_from_properties(props), http_url=props.get(HTTP_URL), timeout=timeout)
