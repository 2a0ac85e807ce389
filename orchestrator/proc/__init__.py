"""Process supervision: every process perfctl starts (servers, wrappers, proxies, load
generators, services) is spawned, watched and stopped here, and dies with perfctl even on
kill -9 (process.py, guardian.py, leftovers.py). Below run/, netem/ and cluster/, which all start
processes; it imports nothing of theirs. Also /proc readers (procfs.py), cached builds and the
JDKs they use (build.py), free ports (ports.py) and resource limits (limits.py)."""
