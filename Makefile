# perfctl: `make run` and `make test` each do all their own set-up on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# the installer: uv resolves, downloads and byte-compiles in parallel (a fresh install of
# .[test]: 19 s, against pip's 42 s on the 2-vCPU VM); pip is the fallback
UV      := uv==0.13.9
# Debian packages the tool and its tests use (installed only when missing; we are root).
# postgresql: the `postgresql` service (initdb, postgres, psql); libpq-dev: /db in the C server; libssl-dev: its HTTPS;
# maven + a JDK: the Java servers (servlet and spring are built with Maven); linux-perf: C server
# profiles; tmux: the live-view test; faketime (libfaketime): the cluster test that steps one host's
# clock.
APT_PACKAGES := gcc make libc6-dev libssl-dev iproute2 nginx-light wrk clang libclang-rt-14-dev clang-format chromium \
                postgresql libpq-dev maven openjdk-17-jdk-headless linux-perf tmux faketime
EXPERIMENT ?= experiments.yaml

.PHONY: setup apt servers run lint docs test test-fast test-live test-study clean

setup: apt $(STAMP) servers

apt:
	@echo "setup: checking the Debian packages perfctl uses ($(APT_PACKAGES))"
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null || \
	      { echo "apt-get install$$missing failed"; exit 1; }; \
	  else echo "warning: missing Debian packages:$$missing (run as root to install them)"; fi; \
	fi

$(STAMP): pyproject.toml
	@echo "setup: creating the Python environment in $(VENV)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "setup: installing perfctl and its Python packages (numpy, pandas, pyarrow, scipy, matplotlib, pytest, py-spy, ...) with uv; about 20 s the first time"
	@$(BIN)/pip install -q $(UV)
	@$(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode -e '.[test]' || \
	  { echo "setup: uv failed; installing with pip instead"; $(BIN)/pip install -q -e '.[test]'; }
	@touch $@
	@echo "setup: Python packages installed"

servers: $(STAMP)
	@echo "setup: building the bundled servers (C with gcc, Java with javac; cached by source hash)"
	@$(BIN)/python -m orchestrator.run.bundled --build-all
	@echo "setup: done; perfctl is $(BIN)/perfctl"

run: setup
	$(BIN)/perfctl run $(EXPERIMENT)
	$(BIN)/perfctl report results/latest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The manual (docs/, mkdocs.yml) into site/; --strict: a broken link or anchor fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The tiers (tests/conftest.py marks each test by its folder and fixtures): unit (no server, no
# trial; on both CPUs with pytest-xdist), live (servers and trials), study (the five seed
# studies and the default experiment). The live tests marked `untimed` assert what perfctl
# and the servers do, not how fast (every test of the protocol folders, and the fault, file,
# TLS and report tests that say so; tests/conftest.py refuses one that is also needs_quiet),
# so they run three at a time on the two CPUs (they wait on servers and processes more than
# they compute: 331 s against 378 s two at a time, here); every other live test runs alone:
# it measures time.
# `make test` runs lint, the manual, then unit, live and study, stopping at the first failure.
PYTEST        := $(BIN)/pytest -q -p no:cacheprovider
# Trials the host spoiled are not taken again in the tests (retry_noisy, docs/running.md;
# tests/run/test_retry.py tests it): three tests at a time, or beside CI's neighbour, no trial
# is quiet by design, and the retries only repeated the noise (a fresh-clone CI: untimed tier
# 535 s against 369 s, timed 588 s against 490-506 s). Tests that need quiet trials take the
# run again themselves (tests/kits/quiet_kit.py).
test test-fast test-live test-study: export PERFCTL_RETRY_NOISY := 0

test: setup lint docs
	$(PYTEST) -m unit -n 2 --durations=10
	$(PYTEST) -m "live and untimed" -n 3 --dist worksteal --durations=15
	$(PYTEST) -m "live and not untimed" --durations=25
	$(PYTEST) -m study --durations=10 tests/studies

test-fast: setup
	$(PYTEST) -m unit -n 2 --durations=10

test-live: setup
	$(PYTEST) -m "live and untimed" -n 3 --dist worksteal --durations=15
	$(PYTEST) -m "live and not untimed" --durations=25

test-study: setup
	$(PYTEST) -m study --durations=10 tests/studies

clean:
	rm -rf $(VENV) site servers/c/build servers/java/build servers/java/stacks/build orchestrator/netem/build *.egg-info
