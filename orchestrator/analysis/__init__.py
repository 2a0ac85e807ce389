"""Views of finished runs: which trials and requests count (views.py), queueing models
(queueing.py), thresholds (check.py), run-to-run comparison (compare.py), figures and the
report, and the pytest plugin. Reads results/ and models/; never imports run code."""
