"""The gateway: a Kafka-protocol server enforcing client quotas in front of a real broker (docs/gateway.md).

Its planes, one sub-package each:

* :mod:`~quotaflow.gateway.data`, the data plane: frames -> decision -> frames (``connection``, ``framing``,
  ``api_handlers``, ``pending``, ``sasl_session``, ``enforcement``, ``broker_quotas``, ``cluster_quota``,
  ``brokers``, ``addresses``, ``versions``, ``mutations``, ``partition_counts``, ``request_memory``,
  ``quota_admin``: APIs 48/49);
* :mod:`~quotaflow.gateway.auth`: TLS, SASL exchanges (terminated or passed through), ACLs and quotaflow's hidden
  topics (``tls``, ``tls_errors``, ``ssl_principal``, ``sasl``, ``sasl_passthrough``, ``upstream_sasl``, ``scram``,
  ``scram_admin``, ``rules``, ``resources``, ``authorize``, ``topic_names``, ``authz_audit``, ``acl_admin``,
  ``hidden_topics``);
* :mod:`~quotaflow.gateway.wire`: Kafka's wire format, below both (``frame_facts``, ``protocol``,
  ``error_response``);
* :mod:`~quotaflow.gateway.observation`: what is recorded of the decisions (``eventlog``, ``metrics_http``,
  ``ratelog``, ``connection_events``, ``row_queue``).

They point one way: the data plane calls auth, never back; both read and write frames through ``wire``, which
imports neither; observation imports none of them.

The shell that wires them stays here: ``server`` (``Gateway``, ``GatewayThread``), the front door ``listener``,
``config`` and ``context`` (what a connection needs of its gateway, as an interface). The planes never import
``server`` or ``listener``, auth never imports ``data`` or ``context``, and no two gateway modules import each
other, annotations included (tests/test_layering.py checks it). Nothing is imported here or in the sub-packages, so
``quotaflow.gateway.auth.sasl`` stays cheap.
"""
