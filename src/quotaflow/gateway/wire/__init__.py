"""Kafka's wire format as both planes read and write it, below both: neither decides anything here.

Pure, no I/O: ``frame_facts`` (a request header and the facts the hot path needs, read from the frame's bytes in
one call; compiled by Cython at setup), ``protocol`` (kafka-python glue: headers, message classes, encode and
decode of every version), ``error_response`` (a refusal built as Kafka's ``getErrorResponse`` builds it).

The data plane (:mod:`quotaflow.gateway.data`) and auth (:mod:`quotaflow.gateway.auth`) import this; it imports
neither (tests/test_layering.py checks it). Nothing is imported here.
"""
