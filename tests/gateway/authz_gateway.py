"""A gateway with Kafka's StandardAuthorizer switched on the way Kafka does (``authorizer.class.name`` and
``super.users`` in ``--config``), SASL/PLAIN users in its SQLite store: for the authorization e2e tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store

AUTHORIZER_CONFIG = ("listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT\n"
                     "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
                     "super.users=User:admin\n")


def sasl(user: str) -> dict[str, Any]:
    """librdkafka settings for ``user`` (password ``USER-secret``)."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret", "log_level": 0}


def start_authorizing_gateway(upstream: str, workdir: Path, users: tuple[str, ...] = ("admin", "bob")
                              ) -> GatewayThread:
    """Started; the caller stops it. ``admin`` is the super user."""
    db = workdir / "q.db"
    with open_store(db) as store:
        for user in users:
            store.put_credential(hash_password(user, f"{user}-secret", iterations=1000))
    config = workdir / "server.properties"
    config.write_text(AUTHORIZER_CONFIG)
    return GatewayThread(upstream, {"SASL_PLAINTEXT": "127.0.0.1:0"}, db, config_path=config).start()
