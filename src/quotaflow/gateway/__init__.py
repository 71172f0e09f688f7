"""The gateway: a Kafka-protocol server enforcing client quotas in front of a real broker (docs/gateway.md).

Its planes, one sub-package each:

* :mod:`~quotaflow.gateway.data`, the data plane: frames -> decision -> frames (``connection``, ``framing``,
  ``protocol``, ``api_handlers``, ``pending``, ``enforcement``, ``broker_quotas``, ``cluster_quota``, ``brokers``,
  ``addresses``, ``versions``, ``mutations``, ``partition_counts``, ``request_memory``, ``quota_admin``: APIs 48/49);
* :mod:`~quotaflow.gateway.auth`: TLS, SASL (terminated or passed through), ACLs and quotaflow's hidden topics
  (``tls``, ``tls_errors``, ``ssl_principal``, ``sasl``, ``sasl_session``, ``sasl_passthrough``, ``upstream_sasl``,
  ``scram``, ``scram_admin``, ``authorize``, ``topic_names``, ``authz_audit``, ``acl_admin``, ``hidden_topics``);
* :mod:`~quotaflow.gateway.observation`: what is recorded of the decisions (``eventlog``, ``metrics_http``,
  ``ratelog``, ``connection_events``).

The shell that wires them stays here: ``server`` (``Gateway``, ``GatewayThread``), the front door ``listener``,
``config`` and ``context`` (what a connection needs of its gateway, as an interface). The planes never import
``server`` or ``listener`` (tests/test_layering.py checks it). Nothing is imported here or in the sub-packages, so
``quotaflow.gateway.auth.sasl`` stays cheap.
"""
