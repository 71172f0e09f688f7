"""quotaflow: Apache Kafka's client-quota system as a standalone product."""

__version__ = "0.1.0"
