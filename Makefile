# perfctl: `make run` and `make test` each do all their own set-up on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Debian packages the tool and its tests use (installed only when missing; we are root).
# postgresql: the `postgresql` service (initdb, postgres, psql); libpq-dev: /db in the C server;
# maven + a JDK: the Java servers (servlet and spring are built with Maven).
APT_PACKAGES := gcc make libc6-dev iproute2 nginx-light wrk clang libclang-rt-14-dev clang-format chromium \
                postgresql libpq-dev maven openjdk-17-jdk-headless
EXPERIMENT ?= experiments.yaml

.PHONY: setup apt servers run test test-fast clean

setup: apt $(STAMP) servers

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null || \
	      { echo "apt-get install$$missing failed"; exit 1; }; \
	  else echo "warning: missing Debian packages:$$missing (run as root to install them)"; fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

servers: $(STAMP)
	$(BIN)/python -m orchestrator.run.bundled --build-all

run: setup
	$(BIN)/perfctl run $(EXPERIMENT)
	$(BIN)/perfctl report results/latest

test: setup
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/pytest -q -m "not slow"

clean:
	rm -rf $(VENV) servers/c/build servers/java/build servers/java/stacks/build orchestrator/netem/build *.egg-info
