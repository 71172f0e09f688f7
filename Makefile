# quotaflow: two entry points, both idempotent on a fresh machine.
#   make demo   set up (Python, compiled modules, node packages), then run the main job on embedded defaults
#   make test   set up as the demo, plus the system tools only tests use (chromium, kcat), then run every test
PY      ?= $(shell command -v python3.11 || command -v python3)
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
COMPILED := $(VENV)/.compiled
COMPILED_SRC := src/quotaflow/gateway/wire/frame_facts.py $(addprefix src/quotaflow/gateway/data/,framing.py framing.pxd pending.py pending.pxd \
	enforcement.py enforcement.pxd connection.py connection.pxd) src/quotaflow/engine/rate.py src/quotaflow/engine/rate.pxd \
	src/quotaflow/gateway/observation/row_queue.py src/quotaflow/gateway/observation/row_queue.pxd

.PHONY: demo test setup test-setup lint typecheck conformance bench bench-setup clean chromium kcat

# What the demo, the linters and the benchmarks need: no system package (the demo runs none of them).
setup: $(STAMP) $(COMPILED) $(NODE_STAMP)

# What only the tests need besides: Debian's chromium and kcat (about a hundred packages with their dependencies).
test-setup: setup chromium kcat

# Debian's chromium, driven by Playwright in the console's browser tests (Playwright's own browser download is not
# used). Installed once, only when missing; needs root (CI runs as root), else says what to run.
chromium:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "the console's browser tests need Debian's chromium: sudo apt-get install -y chromium" >&2; fi; }

# Debian's kcat (librdkafka 2.0.2), one of the real clients of the gateway's client-matrix test (SCRAM through it
# needs quotaflow.sasl.scram.legacy.client.nonce: librdkafka < 2.6.1). Installed once, only when missing, as chromium.
kcat:
	@test -x /usr/bin/kcat || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; \
	  else echo "the client-matrix test needs Debian's kcat: sudo apt-get install -y kcat" >&2; fi; }

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# The modules Cython compiles (setup.py), each next to its pure-Python source; rebuilt when a source changes.
# gcc and the Python headers come with the machine; without them the pure-Python forms run.
$(COMPILED): $(STAMP) setup.py $(COMPILED_SRC)
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -c "from quotaflow.engine import rate; from quotaflow.gateway.data import connection, enforcement, framing, pending; from quotaflow.gateway.wire import frame_facts; from quotaflow.gateway.observation import row_queue; print('compiled engine rate, data plane and row queue:', all(m.COMPILED for m in (rate, frame_facts, framing, pending, enforcement, connection, row_queue)))"
	@touch $(COMPILED)

$(NODE_STAMP): package.json
	npm install --no-audit --no-fund --silent
	@touch $(NODE_STAMP)

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

conformance: setup
	$(BIN)/python -m quotaflow.conformance $${QUOTAFLOW_KAFKA_REFERENCE:-../shared/kafka-reference}/vectors

test: test-setup
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=30

demo: setup
	$(BIN)/python -m quotaflow.demo

bench: setup
	$(BIN)/python bench/admin.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/console.py

# bench/gateway_cpu.py compares the gateway with HAProxy in TCP mode (Debian's haproxy, 2.6 on bookworm): installed
# once, only when missing; needs root (CI runs as root), else says what to run.
bench-setup: setup
	@command -v haproxy >/dev/null || test -x /usr/sbin/haproxy || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; \
	  else echo "bench/gateway_cpu.py needs Debian's haproxy: sudo apt-get install -y haproxy" >&2; exit 1; fi; }
	@command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; \
	  else echo "bench/gateway_footprint.py needs Debian's valgrind: sudo apt-get install -y valgrind" >&2; exit 1; fi; }

clean:
	rm -rf $(VENV) node_modules build *.egg-info
