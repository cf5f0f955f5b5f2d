"""What the kubernetes client's own ``leaderelection`` (client 37.0.2) does wrong, and that the
wrapper in service/kubeapi/leaderelection.py mends each point (its docstring lists them).

If one of these starts failing on the library's side, the library has been fixed: drop the
matching piece of the wrapper.
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi.leaderelection import (
    ElectionConfig,
    LeaderElector,
    _Config,
    _LeaseApi,
    _Lock,
)
from tests.controllers.conftest import FaultServer, wait_for

CONFIG = ElectionConfig("ns", "lease", "me", lease_duration=2.0, renew_deadline=1.0, retry_period=0.05)
NOW = str(dt.datetime(2026, 1, 2, 3, 4, 5, 678901))


@pytest.fixture
def faults() -> Iterator[FaultServer]:
    server = FaultServer()
    yield server
    server.server.server_close()  # the test shuts it down itself


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_the_library_lock_uses_the_default_client_ours_the_given_one() -> None:
    api = kube.api_client(host="http://127.0.0.1:1")
    theirs = LeaseLock("lease", "ns", "me").api_instance.api_client
    assert theirs is not api and theirs.configuration.host == client.Configuration.get_default_copy().host != api.configuration.host
    ours = _Lock(CONFIG, _LeaseApi(api, timeout=1.0))
    assert ours.api_instance.api.api_client is api


def test_a_connection_error_escapes_the_library_but_is_a_failed_attempt_with_ours() -> None:
    api = kube.api_client(host=f"http://127.0.0.1:{_closed_port()}")
    theirs = LeaseLock("lease", "ns", "me")
    theirs.api_instance = client.CoordinationV1Api(api)
    election = leaderelection.LeaderElection(_Config(theirs, CONFIG, lambda: None, lambda: None))
    # Not an ApiException: it leaves try_acquire_or_renew, renew_loop and run() alike, so a
    # leader whose API server vanishes never reaches onstopped_leading.
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        election.try_acquire_or_renew()
    ours = _Lock(CONFIG, _LeaseApi(api, timeout=1.0))
    election = leaderelection.LeaderElection(_Config(ours, CONFIG, lambda: None, lambda: None))
    assert election.try_acquire_or_renew() is False


def test_the_library_config_exits_the_process_on_sub_second_periods() -> None:
    lock = LeaseLock("lease", "ns", "me")
    with pytest.raises(SystemExit, match="retry_period must be greater than one"):
        electionconfig.Config(lock, 2, 1.5, 0.2, lambda: None, None)
    with pytest.raises(ValueError, match="lease-duration > renew-deadline"):
        ElectionConfig("ns", "lease", "me", lease_duration=1.0, renew_deadline=1.5, retry_period=0.2)
    assert _Config(lock, CONFIG, lambda: None, lambda: None).retry_period == 0.05


def test_the_library_lock_crashes_on_a_fractional_lease_duration() -> None:
    # LeaderElection writes str(config.lease_duration) into the record; the lock int()s it.
    lock = LeaseLock("lease", "ns", "me")
    with pytest.raises(ValueError, match="invalid literal for int"):
        lock.get_lease_spec(LeaderElectionRecord("me", str(15.0), NOW, NOW))
    assert _Config(lock, CONFIG, lambda: None, lambda: None).lease_duration == 2


def test_the_library_never_counts_lease_transitions() -> None:
    api = kube.api_client(host="http://127.0.0.1:1")
    held_by_a = client.V1LeaseSpec(holder_identity="a", lease_transitions=3)
    theirs = LeaseLock("lease", "ns", "me").get_lease_spec(LeaderElectionRecord("me", "2", NOW, NOW), held_by_a)
    assert theirs.lease_transitions == 3
    ours = _Lock(CONFIG, _LeaseApi(api, timeout=1.0))
    held_by_a = client.V1LeaseSpec(holder_identity="a", lease_transitions=3)
    assert ours.get_lease_spec(LeaderElectionRecord("me", "2", NOW, NOW), held_by_a).lease_transitions == 4
    renewed = ours.get_lease_spec(LeaderElectionRecord("me", "2", NOW, NOW), client.V1LeaseSpec(holder_identity="me", lease_transitions=4))
    assert renewed.lease_transitions == 4
    assert ours.get_lease_spec(LeaderElectionRecord("me", "2", NOW, NOW)).lease_transitions == 0


def test_the_library_run_cannot_be_stopped_ours_can(faults: FaultServer) -> None:
    """An API server that never lets anyone take the Lease (the lock absent, creating it
    refused): the library's run() retries for ever and offers no way out."""
    api = kube.api_client(host=faults.host)
    theirs = LeaseLock("lease", "ns", "me")
    theirs.api_instance = client.CoordinationV1Api(api)
    election = leaderelection.LeaderElection(_Config(theirs, CONFIG, lambda: None, lambda: None))
    ended: list[BaseException] = []

    def run() -> None:
        try:
            election.run()
        except BaseException as err:  # what ends the thread is the point
            ended.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: len(faults.requests) >= 3, what="the library to retry")
    assert thread.is_alive() and not any(hasattr(election, n) for n in ("stop", "cancel", "release"))

    ours = LeaderElector(kube.Kube(kube.api_client(host=faults.host)), CONFIG, on_started_leading=lambda: None, on_stopped_leading=lambda: None)
    ours.start()
    seen = len(faults.requests)
    wait_for(lambda: len(faults.requests) >= seen + 3, what="ours to retry")
    assert ours._thread is not None and ours._thread.is_alive()
    ours.stop()
    ours._thread.join(5)
    assert not ours._thread.is_alive()

    # The library's thread ends only when the server goes away, by an exception (see above).
    faults.stop()
    thread.join(10)
    assert not thread.is_alive() and ended and not isinstance(ended[0], ApiException)
