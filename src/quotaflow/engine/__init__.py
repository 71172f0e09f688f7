"""Engine: Kafka-exact metering and throttling. Pure code: no I/O, no asyncio; time is an argument."""
