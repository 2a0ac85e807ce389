"""perfctl orchestrator: experiment files in, trials, models and plots out."""

__version__ = "0.1.0"
