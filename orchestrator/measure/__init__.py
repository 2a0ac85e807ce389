"""What perfctl measures beside the load generator's own figures: the server's CPU, memory and
threads (sampler.py), whether the host left the trial alone (noise.py, schedstat.py), the
kernel's TCP view of the listener (kernel_tcp.py over sock_diag.py), profiles (profiler.py),
the live line (live.py) and the host itself (hostinfo.py). Imports only proc/, and the names
of the columns it fills from results/schema.py."""
