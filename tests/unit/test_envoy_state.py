"""The Envoy child's state directory and bootstrap: the admin is a 0600 Unix socket in a
directory only turnout's user can use, and Envoy reconnects to xDS within about a second."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnout.envoy.bootstrap import bootstrap_config
from turnout.envoy.process import RESTART_DELAYS
from turnout.envoy.state import StateDir, StateDirError, default_state_dir, process_start_time


def test_bootstrap_puts_the_admin_on_a_0600_socket_when_given_one(tmp_path: Path) -> None:
    sock = tmp_path / "admin.sock"
    config = bootstrap_config(
        xds_address="127.0.0.1",
        xds_port=18000,
        admin_address="127.0.0.1",
        admin_port=9901,
        node_id="n",
        admin_socket=sock,
    )
    assert config["admin"] == {"address": {"pipe": {"path": str(sock), "mode": 0o600}}}
    tcp = bootstrap_config(
        xds_address="127.0.0.1", xds_port=1, admin_address="127.0.0.1", admin_port=9901, node_id="n"
    )
    assert tcp["admin"]["address"]["socket_address"]["port_value"] == 9901


def test_envoy_retries_the_xds_stream_within_a_second() -> None:
    config = bootstrap_config(
        xds_address="127.0.0.1", xds_port=1, admin_address="127.0.0.1", admin_port=2, node_id="n"
    )
    grpc = config["dynamic_resources"]["ads_config"]["grpc_services"][0]["envoy_grpc"]
    assert grpc["retry_policy"]["retry_back_off"]["max_interval"] == "1s"


def test_state_dir_is_created_private(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "a" / "state")
    state.prepare()
    assert (state.path.stat().st_mode & 0o777) == 0o700


def test_state_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(StateDirError, match="open to other users"):
        StateDir(shared).prepare()


def test_state_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(StateDirError, match="not a directory"):
        StateDir(tmp_path / "link").prepare()


def test_state_dir_too_long_for_a_socket_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match="too long"):
        StateDir(tmp_path / ("x" * 120)).prepare()


def test_default_state_dir_is_per_user_and_per_http_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_state_dir(8080) == tmp_path / "turnout-8080"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_state_dir(8080).name == f"turnout-{os.getuid()}-8080"


def test_pid_file_round_trip_and_clear_only_own_pid(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert state.read_pid() is None
    state.write_pid(1234)
    state.clear_pid(999)
    assert state.read_pid() == 1234
    state.clear_pid(1234)
    assert state.read_pid() is None


def test_process_start_time_names_a_live_process() -> None:
    assert process_start_time(os.getpid()) is not None
    assert process_start_time(2**22 + 12345) is None  # above pid_max: never a process


def test_restart_is_immediate_first_and_waits_two_seconds_at_most() -> None:
    assert RESTART_DELAYS[0] == 0 and max(RESTART_DELAYS) == 2.0
