"""`python -m orchestrator.cli ...` runs the CLI exactly as the `perfctl` script does."""

from .main import main

main()
