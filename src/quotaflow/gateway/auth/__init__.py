"""Who a client is and what it may do: TLS, SASL (terminated or passed through), ACLs, quotaflow's hidden topics.

Pure cores, no I/O: ``rules`` and ``resources`` (what each API needs: a rule table, data, and the resources Kafka's
message definitions mark), ``authorize`` (per-API authorization as Kafka's KafkaApis decides it), ``topic_names``
(Produce and Fetch topics read from the frame), ``hidden_topics`` (quotaflow's own topics, out of every client's
reach), ``authz_audit`` (where the decisions go), ``ssl_principal`` (``ssl.principal.mapping.rules``), ``scram`` (the
SCRAM exchange), ``sasl_passthrough`` (the principal read from a passed-through exchange), ``tls_errors`` (TLS failures
a client causes, logged as what they are).

Thin I/O shells around them: ``tls`` (SSL contexts and the handshake on accepted sockets), ``sasl`` (PLAIN and the
verifier's bounded thread pool), ``upstream_sasl`` (the gateway's own identity at an authenticating upstream),
``acl_admin`` and ``scram_admin`` (the ACL APIs and KIP-554 answered from the store in an executor thread).

The data plane calls these, never the other way: nothing here imports :mod:`quotaflow.gateway.data` or the connection's
``context``; frames are read and written through :mod:`quotaflow.gateway.wire` (tests/test_layering.py checks it).
Nothing is imported here, so ``quotaflow.gateway.auth.sasl`` stays cheap for the CLI.
"""
