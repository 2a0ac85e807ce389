"""The bundled servers' concurrency models, as data (servers/PROTOCOL.md describes each).

The first model of each implementation is its default. Validation (experiment/) and launching
(run/bundled.py) both read this table; neither owns it.
"""

from __future__ import annotations

CONCURRENCY_MODELS: dict[str, tuple[str, ...]] = {
    "c": ("single", "thread", "pool", "epoll"),
    "java": ("single", "thread", "pool", "virtual", "rmi", "rmi-single", "servlet", "spring"),
    "python": ("async", "pool"),
}


# How each bundled concurrency model dispatches requests to its workers: the queueing model's
# discipline (models/stations.py DISPATCHES). `per_connection`: a worker (thread) keeps a
# connection until the client closes it (a thread per connection is one too: it never runs
# out); `shared_queue`: workers take requests from one queue, connections are not pinned
# (Tomcat's NIO connector parks idle keep-alive connections in its poller); `event_loop`: each
# loop serves its own connections' requests one at a time.
DISPATCH: dict[tuple[str, str], str] = {
    ("c", "single"): "per_connection",
    ("c", "thread"): "per_connection",
    ("c", "pool"): "per_connection",
    ("c", "epoll"): "event_loop",
    ("java", "single"): "per_connection",
    ("java", "thread"): "per_connection",
    ("java", "pool"): "per_connection",
    ("java", "virtual"): "per_connection",
    ("java", "rmi"): "per_connection",
    ("java", "rmi-single"): "per_connection",
    ("java", "servlet"): "shared_queue",
    ("java", "spring"): "shared_queue",
    ("python", "async"): "event_loop",
    ("python", "pool"): "per_connection",
}
# Event loops whose waits (sleep_us, a /db query) block the loop: C `epoll` sleeps in
# nanosleep and queries synchronously (servers/PROTOCOL.md). Python `async` awaits both.
BLOCKING_LOOPS = {("c", "epoll")}


def dispatch_of(impl: str, model: str) -> str:
    """How the bundled server (impl, model) dispatches requests (DISPATCH)."""
    return DISPATCH[(impl, model)]


# Concurrency models that speak Java RMI instead of HTTP: only the `rmi` driver can load them.
RMI_MODELS = ("rmi", "rmi-single")

# The bundled load drivers (loadgen/DRIVER.md) and the load modes each implements. `http` is
# the asyncio load generator (python -m loadgen); `rmi` is servers/java's perfctl.driver.RmiDriver.
DRIVERS: dict[str, tuple[str, ...]] = {
    "http": ("closed", "open", "burst", "ramp"),
    "rmi": ("closed", "open", "burst"),
}

# Java models on real stacks, built with Maven (servers/java/stacks): `servlet` is a plain servlet
# on embedded Tomcat, `spring` Spring Boot MVC on its default embedded Tomcat.
STACK_MODELS = {"java": ("servlet", "spring")}
# (impl, model) pairs whose server has /db (servers/PROTOCOL.md); None: every model of the impl.
# Java: every model, the RMI ones included (a call to "/db"), over one JDBC class (Db.java).
DB_MODELS: dict[str, tuple[str, ...] | None] = {"c": None, "python": None, "java": None}


def has_db(impl: str, model: str) -> bool:
    """Whether the bundled server (impl, model) has a /db endpoint."""
    return impl in DB_MODELS and (DB_MODELS[impl] is None or model in DB_MODELS[impl])


def db_servers() -> str:
    """The bundled servers with /db, in words ("impl c (every model), ...")."""
    return ", ".join(
        f"impl {i} ({'every model' if m is None else 'models ' + ', '.join(m)})"
        for i, m in DB_MODELS.items()
    )


def default_concurrency_model(impl: str) -> str:
    """The concurrency model an implementation runs when the experiment names none."""
    return CONCURRENCY_MODELS[impl][0]


def unknown_impl_or_model(impl: str, model: str | None = None) -> str | None:
    """Why (impl, model) names no bundled server, or None when it does."""
    if impl not in CONCURRENCY_MODELS:
        return (
            f"unknown server impl {impl!r}; bundled servers are "
            f"{', '.join(CONCURRENCY_MODELS)} (or give a `cmd:` instead of `impl:`)"
        )
    if model is not None and model not in CONCURRENCY_MODELS[impl]:
        return (
            f"impl {impl!r} has no concurrency model {model!r}; choose one of "
            f"{', '.join(CONCURRENCY_MODELS[impl])}"
        )
    return None
