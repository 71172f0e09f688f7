"""A SASL-passthrough gateway in front of an authenticating upstream, a recording relay between the two: what a
passthrough gateway forwarded, seen on the wire (issue 34's gate in passthrough mode, on SASL_PLAINTEXT or SASL_SSL).

The authenticating upstream is a second gateway terminating SASL/PLAIN with Kafka's StandardAuthorizer in front of
tansu (``authz_gateway.start_authorizing_gateway``: users admin, the super user, and bob with no ACL), as in
test_e2e_sasl_passthrough.py: neither tansu 0.6.0 nor librdkafka's mock cluster authenticates clients. The front
gateway passes the SASL exchange through (``quotaflow.upstream.security.protocol=SASL_PLAINTEXT`` without an
identity of its own), so the cluster authenticates and authorizes; the front still hides quotaflow's topics and
refuses what it does not advertise. With ``tls`` its listener is SASL_SSL, with a certificate of a CA made here.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import trustme

from quotaflow.gateway.server import GatewayThread

from .authz_gateway import start_authorizing_gateway
from .gateway_wire import Wire
from .recording_upstream import RecordingUpstream


@dataclass(frozen=True, slots=True)
class PassthroughStack:
    front: GatewayThread
    cluster: GatewayThread
    relay: RecordingUpstream
    listener: str
    ca_file: str | None  # the CA the front's SASL_SSL listener is checked against (None: SASL_PLAINTEXT)

    def tls_context(self) -> ssl.SSLContext | None:
        return None if self.ca_file is None else ssl.create_default_context(cafile=self.ca_file)

    def wire(self) -> Wire:
        """A raw connection to the front gateway's bootstrap port (TLS on a SASL_SSL listener), not authenticated."""
        return Wire(self.front.address(self.listener), tls=self.tls_context())

    def client_config(self, user: str) -> dict[str, str]:
        """librdkafka settings for ``user`` (password ``USER-secret``) on the front gateway."""
        config = {"bootstrap.servers": self.front.bootstrap(self.listener), "sasl.mechanism": "PLAIN",
                  "sasl.username": user, "sasl.password": f"{user}-secret",
                  "security.protocol": "SASL_PLAINTEXT" if self.ca_file is None else "SASL_SSL"}
        if self.ca_file is not None:
            config["ssl.ca.location"] = self.ca_file
        return config


@contextmanager
def passthrough_stack(upstream: str, workdir: Path, *, tls: bool = False,
                      front_props: Mapping[str, str] | None = None) -> Iterator[PassthroughStack]:
    """The stack in front of ``upstream`` (tansu's bootstrap), stopped on exit; ``front_props``: more of the
    front gateway's configuration."""
    with ExitStack() as stack:
        (workdir / "cluster").mkdir(exist_ok=True)
        cluster = start_authorizing_gateway(upstream, workdir / "cluster")
        stack.callback(cluster.stop)
        relay = stack.enter_context(RecordingUpstream(cluster.bootstrap()))
        listener = "SASL_SSL" if tls else "SASL_PLAINTEXT"
        props = {"listener.security.protocol.map": f"{listener}:{listener}",
                 "quotaflow.upstream.security.protocol": "SASL_PLAINTEXT"}
        ca_file: str | None = None
        if tls:
            ca = trustme.CA()
            ca.cert_pem.write_to_path(ca_file := str(workdir / "ca.pem"))
            server = str(workdir / "server.pem")
            ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(server)
            props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": server}
        props |= dict(front_props or {})
        config = workdir / "front.properties"  # as ``--config``: all of it is read (the authorizer's settings too)
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        front = GatewayThread(relay.bootstrap, {listener: "127.0.0.1:0"}, workdir / "front.db",
                              config_path=config).start()
        stack.callback(front.stop)
        assert front.gateway is not None and front.gateway.sasl_passthrough
        yield PassthroughStack(front, cluster, relay, listener, ca_file)
