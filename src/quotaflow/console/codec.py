"""The JSON documents the console shares with ``client-quotas --output json``: describe, resolve, alter results.

One import point, so the console serves exactly what the CLI prints.
"""

from quotaflow.cli.client_quotas import alter_json, describe_json, resolve_json

__all__ = ["alter_json", "describe_json", "resolve_json"]
