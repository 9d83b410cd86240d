# make demo: install, then dissect the bundled samples.
# make check: install, then lint, type-check and run the quick tier: every test but those
#   that need real peers (pulsar-lite, Apache's broker), packet capture, Spark, external tools
#   or a long run (a few minutes).
# make test: install, then lint, type-check and run the whole suite (real peers included),
#   then a one-minute native fuzz run of the compiled core (fuzz-native-short).
# make docs: regenerate the generated parts of README.md and docs/.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install java testdeps demo check test lint typecheck pytest proto docs bench bench-quick fuzz-growth fuzzdeps fuzz-native fuzz-native-short clean

install: $(STAMP) java

# Sources are dependencies: setup.py compiles the hot modules with mypyc and the C core
# (dissector/_core/*.c, *.h), and a module edited since would otherwise run its old code.
$(STAMP): pyproject.toml setup.py $(shell find dissector -name '*.py' -o -name '*.[ch]')
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
# capture the live tests compare with), libpcap (the reference compiler of BPF filters,
# and what `live -f EXPR` uses) and tshark (the benchmark's yardstick, whose quick mode the
# tests run and cross-check), mergecap (wireshark-common: the reference merge of captures
# taken at the same time), chromium (renders the HTML report headless in its test),
# prometheus (the real server the tests start on loopback to scrape `live --metrics` and run
# the Grafana board's queries; its promtool checks expositions) and prometheus-node-exporter
# (the textfile collector: what reads `summary --format prometheus`). The packages' own
# services are stopped and disabled if apt started them: the tests start their own.
# maven and a JDK (javac) fetch and build the Apache broker peer's jars and our Java client
# (tests/support/apache/; the jars are cached in /tmp/pulsar-dissector-apache).
# Go (1.24 or newer, what tests/support/gopeer/go.mod names) builds our Go peer with the Go
# client: when no `go` that new is on PATH (Debian bookworm's golang-go is 1.19), the Go
# release that tests/support/gopeer/toolchain.py names is fetched from the Go module proxy
# (as the module golang.org/toolchain, sha256 checked) into /tmp/pulsar-dissector-go.
# The product's default path needs none of them.
testdeps:
	@$(PYTHON) -m tests.support.gopeer.toolchain
	@missing=""; \
	  command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	  command -v javac >/dev/null 2>&1 || missing="$$missing default-jdk-headless"; \
	  { command -v tcpdump || test -x /usr/sbin/tcpdump; } >/dev/null 2>&1 || missing="$$missing tcpdump"; \
	  /sbin/ldconfig -p 2>/dev/null | grep -q 'libpcap\.so' || missing="$$missing libpcap0.8"; \
	  command -v tshark >/dev/null 2>&1 || missing="$$missing tshark"; \
	  command -v mergecap >/dev/null 2>&1 || missing="$$missing wireshark-common"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing="$$missing prometheus"; \
	  command -v prometheus-node-exporter >/dev/null 2>&1 || missing="$$missing prometheus-node-exporter"; \
	  if [ -n "$$missing" ]; then \
	    echo "for the tests:$$missing not found: installing with apt"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	    for unit in prometheus prometheus-node-exporter; do \
	      case " $$missing " in *" $$unit "*) \
	        { systemctl disable --now $$unit || service $$unit stop; } >/dev/null 2>&1 || true;; \
	      esac; \
	    done; \
	  fi

demo: install
	$(VENV)/bin/pulsar-dissect read pcaps/produce_consume.pcap
	mkdir -p out
	$(VENV)/bin/pulsar-dissect read pcaps/*.pcap* --table frames --format parquet -o out/frames.parquet
	$(VENV)/bin/pulsar-dissect read pcaps/*.pcap* --table conversations --format csv -o out/conversations.csv
	$(VENV)/bin/pulsar-dissect read pcaps/*.pcap* --table anomalies --format jsonl -o out/anomalies.jsonl
	@echo "tables written to out/: frames.parquet conversations.csv anomalies.jsonl"
	$(VENV)/bin/pulsar-dissect report pcaps/*.pcap* -o reports/demo-report.html

# lint and typecheck need the venv, not Java (make check runs them without it).
lint: $(STAMP)
	$(VENV)/bin/ruff check dissector tests scripts benchmarks fuzz
	$(VENV)/bin/ruff format --check dissector tests scripts benchmarks fuzz

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: install testdeps
	$(PY) -m pytest -q

test: lint typecheck pytest fuzz-native-short

# The tiers are pytest markers (pyproject.toml; tests/conftest.py sets them from what each
# test uses, tests/support/tiers.py). No Java, apt package or root is needed here.
QUICK := not (peers or apache or capture or spark or tools or slow)
check: lint typecheck
	$(PY) -m pytest -q -n 2 -m "$(QUICK)"

# Benchmarks against tshark (installed with apt only here: never a runtime dependency).
# bench: issue 12's captures (cached in /tmp/pulsar-dissector-bench), every command timed
# as a process, reports/benchmark.md and reports/benchmark.json (about 15 minutes); then the
# frame decoder alone (reports/bench_framing.json). py-spy, which profiles inside the
# mypyc-compiled modules, is installed into .venv here only.
# bench-quick: the same suite on tiny captures in a temporary folder (proves it works).
bench: install
	@command -v tshark >/dev/null 2>&1 || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q tshark; }
	@test -x $(VENV)/bin/py-spy || $(PY) -m pip install -q py-spy
	$(PY) -m benchmarks.run
	$(PY) -m benchmarks.bench_framing

bench-quick: install
	@command -v tshark >/dev/null 2>&1 || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q tshark; }
	$(PY) -m benchmarks.run --quick

# Growth check (fuzz/growth.py, issue 31): inputs an attacker can grow (TLS KeyUpdate chains,
# resync garbage, long -Y words, overlapping TCP segments and IP fragments, TLS sessions
# waiting for keys) made at n, 2n, 4n; time may grow at most 2.2x per doubling, memory must
# stay bounded. A few minutes; wall-clock, so not part of `make test`. Exit 1 on a failure;
# reports/fuzz_growth.md and .json.
fuzz-growth: install
	$(PY) -m fuzz.growth --out reports/fuzz_growth.json

# Native fuzzing of the compiled stages (fuzz/native/run.sh, which lists the entry points:
# the record walk, walk_fuzz.c seeded from pcaps/; the framing stage, frames_fuzz.c seeded
# from pcaps/streams/ and pcaps/; docs/compiled-core.md). With clang and its libFuzzer
# runtime (installed with apt when missing, as testdeps does: Debian's clang and
# libclang-rt-N-dev), libFuzzer coverage-guided for FUZZ_SECONDS per entry point (or
# FUZZ_RUNS executions), its corpora kept in FUZZ_DIR; where they cannot be had, gcc's
# address and undefined-behaviour sanitizers over random mutations of the same seeds
# (PD_FUZZ_RUNS, default 2,000,000). Each run prints its executions; exit 1 on a finding.
# fuzz-native-short: the same for about FUZZ_SHORT_SECONDS in all (shared among the entry
# points) in a new folder (kept on a finding), so `make test` runs it on any machine.
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= -1
FUZZ_SHORT_SECONDS ?= 60
FUZZ_DIR := /tmp/pulsar-dissector-fuzz-native
LIBFUZZER = $$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
fuzzdeps:
	@if ! command -v clang >/dev/null 2>&1 || ! test -f "$(LIBFUZZER)"; then \
	  echo "fuzz-native: clang with libFuzzer not found: installing with apt"; \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang && \
	    v=$$(clang -dumpversion | cut -d. -f1) && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libclang-rt-$$v-dev; } \
	  || echo "fuzz-native: could not install clang: gcc sanitizers instead"; \
	fi

fuzz-native: fuzzdeps
	FUZZ_DIR=$(FUZZ_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) bash fuzz/native/run.sh

fuzz-native-short: fuzzdeps
	@dir=$$(mktemp -d /tmp/pulsar-dissector-fuzz-short.XXXXXX) && \
	  FUZZ_DIR=$$dir FUZZ_TOTAL_SECONDS=$(FUZZ_SHORT_SECONDS) bash fuzz/native/run.sh && \
	  rm -rf "$$dir"

# Regenerate the protobuf bindings from proto/pulsar_api.proto.
proto: install
	$(PY) scripts/gen_proto.py

# Regenerate the generated parts of README.md and docs/ (tables and columns, anomaly codes,
# the CLI reference, the package layout, the README's example outputs): scripts/gen_docs.py.
# tests/test_docs.py fails when they are stale. No Java needed.
docs: $(STAMP)
	$(PY) scripts/gen_docs.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
