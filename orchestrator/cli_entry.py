"""`python -m orchestrator.cli_entry ...` runs the CLI exactly as the `perfctl` script does."""
from .cli import main

if __name__ == "__main__":
    main()
