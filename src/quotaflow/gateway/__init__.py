"""The gateway: a Kafka-protocol server enforcing client quotas in front of a real broker (docs/gateway.md).

Modules: ``server`` (``Gateway``, ``GatewayThread``), ``connection`` (one client connection), ``protocol``
(kafka-python glue), ``versions`` (ApiVersions), ``addresses`` (address rewriting), ``quota_admin`` (APIs 48/49),
``sasl`` (SASL/PLAIN), ``enforcement`` (the engine's managers), ``connection_events``, ``config``; the front door
``listener``, ``metrics_http`` and ``eventlog``. Nothing is imported here, so ``quotaflow.gateway.sasl`` stays cheap.
"""
