"""What the gateway records of its decisions, for operators and for the backtest; it decides nothing itself.

Pure cores: ``connection_events`` (the listener's connection decisions reported as usage events, answers
unchanged), ``ratelog`` (warnings that may repeat thousands of times a second, one line per interval) and
``row_queue`` (where the event loop hands rows to the log's writer; compiled, so the connection core appends a
request's row in C).

I/O shells: ``eventlog`` (the usage event log: rows appended on the event loop, a writer thread turning them into
rolling Parquet files the backtest replays) and ``metrics_http`` (``/metrics`` and JSON routes over asyncio HTTP).

No module here imports the data plane, auth or the shell (tests/test_layering.py checks it). Nothing is imported
here.
"""
