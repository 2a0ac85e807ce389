"""The search tests import their simulated server (search_sim.py) by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
