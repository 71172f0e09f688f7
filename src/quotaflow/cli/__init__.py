"""The ``quotaflow`` command line."""
