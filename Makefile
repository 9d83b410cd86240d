# make demo: install, then dissect the bundled samples.
# make test: install, then lint, type-check and run the whole suite (real peers included).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install java testdeps demo test lint typecheck pytest proto bench clean

install: $(STAMP) java

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	touch $(STAMP)

# Spark needs a Java runtime (17+); install one with apt only when none is on PATH.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "java not found: installing a headless JRE with apt"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jre-headless; }

# Test-only system packages, installed with apt only when missing: tcpdump (the reference
# capture the live tests compare with) and libpcap (the reference compiler of BPF filters,
# and what `live -f EXPR` uses). The product's default path needs neither.
testdeps:
	@missing=""; \
	  { command -v tcpdump || test -x /usr/sbin/tcpdump; } >/dev/null 2>&1 || missing="$$missing tcpdump"; \
	  /sbin/ldconfig -p 2>/dev/null | grep -q 'libpcap\.so' || missing="$$missing libpcap0.8"; \
	  if [ -n "$$missing" ]; then \
	    echo "for the tests:$$missing not found: installing with apt"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  fi

demo: install
	$(VENV)/bin/pulsar-dissect read pcaps/produce_consume.pcap
	mkdir -p out
	$(VENV)/bin/pulsar-dissect read pcaps/*.pcap* --table frames --format parquet -o out/frames.parquet
	$(VENV)/bin/pulsar-dissect read pcaps/*.pcap* --table conversations --format csv -o out/conversations.csv
	$(VENV)/bin/pulsar-dissect read pcaps/*.pcap* --table anomalies --format jsonl -o out/anomalies.jsonl
	@echo "tables written to out/: frames.parquet conversations.csv anomalies.jsonl"

lint: install
	$(VENV)/bin/ruff check dissector tests scripts benchmarks
	$(VENV)/bin/ruff format --check dissector tests scripts benchmarks

typecheck: install
	$(VENV)/bin/mypy

pytest: install testdeps
	$(PY) -m pytest -q

test: lint typecheck pytest

# Benchmarks against tshark (installed with apt only here: never a runtime dependency).
bench: install
	@command -v tshark >/dev/null 2>&1 || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q tshark; }
	$(PY) -m benchmarks.bench_framing
	$(PY) -m benchmarks.bench_pipeline

# Regenerate the protobuf bindings from proto/pulsar_api.proto.
proto: install
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
