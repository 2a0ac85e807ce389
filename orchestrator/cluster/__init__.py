"""Servers and load-generator shards on the hosts of a Dask distributed cluster (`cluster:`).

Imported only when an experiment has `cluster:`; without it perfctl neither imports Dask nor
starts a Dask process.

- certs.py: the cluster's CA and certificates for mutual TLS (`perfctl cluster certs`);
- hosts.py: a local cluster's hosts h1..hN as network namespaces on one bridge;
- local.py: the local scheduler and one worker per namespace, under perfctl's supervisor;
- session.py: the connection to the scheduler, the hosts, their clocks and liveness;
- tasks.py: what runs on a host (in a Dask worker): start and stop processes, return files;
- merge.py: shards' records and self-checks into one trial;
- trial.py: one trial on the cluster.
"""
