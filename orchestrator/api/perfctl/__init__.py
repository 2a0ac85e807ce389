"""`import perfctl`: pyproject.toml installs this directory as the top-level package `perfctl`,
and it hands over orchestrator.api itself, so `perfctl` and `orchestrator.api` are one module
(one PerfctlError class, one set of lazily loaded functions), never two copies."""

import sys

from orchestrator import api

sys.modules[__name__] = api
