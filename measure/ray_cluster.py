"""Connecting to Ray: a new local Ray on demand, or a cluster at an address whose workers run the
same autotune, Ray and Python as this driver. Ray is the optional [ray] extra.

    >>> from autotune.measure.ray_cluster import connect      # doctest: +SKIP
    >>> ray = connect()                              # a local Ray
    >>> ray = connect("10.0.0.5:6379")               # a running cluster
"""
from __future__ import annotations

import contextlib
import logging
import socket
from typing import Iterator

from autotune.errors import AutotuneError, install_hint

# Ray's notice, on every start of a new local cluster (and on joining one with a token on this
# machine), that token authentication is on (its default, which autotune keeps): the logger it
# comes from, and how it begins
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


class _WithoutTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(TOKEN_NOTICE)


@contextlib.contextmanager
def without_token_notice() -> Iterator[None]:
    """Ray's token-authentication notice left out of the output while autotune starts or joins a Ray
    (the authentication itself stays on; every other message of Ray's passes)."""
    log, notice = logging.getLogger(TOKEN_NOTICE_LOGGER), _WithoutTokenNotice()
    log.addFilter(notice)
    try:
        yield
    finally:
        log.removeFilter(notice)


class ClusterError(AutotuneError, RuntimeError):
    """Ray could not be reached or does not match this driver."""


def _reachable(address: str, timeout: float = 5.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "ray://..." and the like: let Ray resolve them
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise ClusterError(f"cannot reach a Ray cluster at {address}: {e.strerror or e}. Start one there with "
                           "`ray start --head`, check the address, or leave out --address to run on a local Ray") from None


def connect(address: str | None = None, *, num_cpus: int | None = None):  # type: ignore[no-untyped-def]
    """ray, initialised: a new local Ray when address is None, else the cluster at address."""
    try:
        import ray
    except ImportError:  # Ray is the [ray] extra
        raise AutotuneError("Ray sweeps and runner='ray' need Ray: "
                            f"{install_hint('ray')} (or: pip install ray)") from None
    if ray.is_initialized():
        return ray
    from autotune.environment import ray_runtime_env
    env = ray_runtime_env()
    try:
        with without_token_notice():
            if address is None:
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                         runtime_env=env)
            else:
                _reachable(address)
                ray.init(address=address, log_to_driver=False, runtime_env=env)
    except ClusterError:
        raise
    except Exception as e:  # Ray raises ConnectionError, RuntimeError("Version mismatch ...") and others
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if "version" in first.lower():
            raise ClusterError(f"the Ray cluster at {address} does not match this driver: {first}. Use the same "
                               "Ray and Python versions on the driver and the cluster") from None
        raise ClusterError(f"cannot start or join Ray{f' at {address}' if address else ''}: {first}") from None
    check_versions(ray)
    return ray


def check_versions(ray) -> None:  # type: ignore[no-untyped-def]
    """The cluster's workers must run the same autotune, Ray and Python as this driver."""
    import platform

    from autotune.version import __version__

    @ray.remote(num_cpus=0)
    def versions() -> tuple[str, str, str]:
        import platform as p

        import ray as r

        from autotune.version import __version__ as v
        return v, r.__version__, ".".join(p.python_version_tuple()[:2])

    mine = (__version__, ray.__version__, ".".join(platform.python_version_tuple()[:2]))
    theirs = tuple(ray.get(versions.remote(), timeout=120))
    if theirs != mine:
        raise ClusterError(f"version mismatch: the cluster runs autotune {theirs[0]}, Ray {theirs[1]}, Python "
                           f"{theirs[2]}; this driver runs autotune {mine[0]}, Ray {mine[1]}, Python {mine[2]}")
