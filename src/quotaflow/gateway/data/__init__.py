"""The data plane: a client's frames in, the quota decision, frames out (upstream's answer or the gateway's own).

Pure cores, no I/O: ``framing`` (frames cut from a socket's bytes), ``pending`` (one request on its way),
``api_handlers`` (what each API does, a table keyed by ApiKey), ``enforcement`` and ``broker_quotas`` (the engine's
managers per upstream broker), ``mutations`` (KIP-599 permits), ``addresses`` (broker-address rewriting), ``versions``
(ApiVersions), ``request_memory`` (the pools for large frames).

Thin I/O shells around them: ``connection`` (one client connection on asyncio callbacks, and its upstream's),
``sasl_session`` (the connection's SASL state machine: it drives auth's exchanges and answers the connection's
requests), ``brokers`` (the upstream cluster's nodes, one gateway port each), ``partition_counts`` (Metadata from the
upstream for KIP-599), ``cluster_quota`` (usage shared through a topic for ``quotaflow.quota.scope=cluster``),
``quota_admin`` (DescribeClientQuotas / AlterClientQuotas, KIP-546, answered from the store in an executor thread).

Authorization and the SASL exchanges, which the connection calls on the way, are :mod:`quotaflow.gateway.auth` (which
never imports this package); Kafka's wire format (``protocol``, ``frame_facts``, ``error_response``),
:mod:`quotaflow.gateway.wire`; what is recorded of each decision, :mod:`quotaflow.gateway.observation`. Nothing is
imported here.
"""
