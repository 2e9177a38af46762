"""Pure parts of ``ferry dev``: port flags and the restart backoff."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ferry import config
from ferry.cli import _parser as build_parser
from ferry.devstack import dev, embedded
from ferry.errors import ConfigError


@pytest.mark.parametrize(
    ("crashes", "delay_s"),
    [(1, 1.0), (2, 2.0), (3, 5.0), (4, 10.0), (5, 10.0), (100, 10.0)],
)
def test_restart_backoff_grows_then_stays(crashes: int, delay_s: float) -> None:
    assert dev.restart_delay_s(crashes) == delay_s


@pytest.mark.parametrize("crashes", [0, -1])
def test_restart_backoff_refuses_nonsense(crashes: int) -> None:
    with pytest.raises(ValueError):
        dev.restart_delay_s(crashes)


@pytest.mark.parametrize(
    ("previous", "ran_s", "expected"),
    [
        (0, 0.5, 1),  # first crash
        (1, 2.0, 2),  # crashing in a loop climbs the backoff
        (3, 59.9, 4),
        (3, 60.0, 1),  # ran a minute: healthy again, back to the first step
        (7, 3600.0, 1),
    ],
)
def test_crash_count_resets_after_a_stable_run(previous: int, ran_s: float, expected: int) -> None:
    assert dev.crashes_in_a_row(previous, ran_s) == expected


def test_port_zero_picks_a_free_port() -> None:
    port = dev._port(0, "--zk-port")
    assert 0 < port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free: binding works


def test_free_ports_are_below_the_ephemeral_range_and_never_repeat() -> None:
    """Outgoing connections take their local ports from the ephemeral range, so a port picked there
    could be taken before the service binds it; below it, only listeners compete."""
    low = embedded._ephemeral_low()
    ports = [embedded.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(embedded.LOWEST_PORT <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free: binding works


def test_a_port_someone_listens_on_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", embedded.free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        draws = iter([busy, busy, busy + 1])
        monkeypatch.setattr(embedded.random, "randrange", lambda *_: next(draws))
        monkeypatch.setattr(embedded, "_handed_out", set())
        assert embedded.free_port() == busy + 1


@pytest.mark.parametrize("value", [-1, 65536, 100000])
def test_port_out_of_range_names_the_flag(value: int) -> None:
    with pytest.raises(ConfigError) as err:
        dev._port(value, "--kafka-port")
    assert err.value.setting == "--kafka-port"


def test_port_in_use_is_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(ConfigError, match="already in use"):
            dev._port(taken, "--portal-port")


def test_port_explicit_free_port_is_kept() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert dev._port(free, "--portal-port") == free


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [],
            {
                "workers": 2,
                "portal_port": 8080,
                "gateway_port": 8081,
                "kafka_port": 9092,
                "zk_port": 2181,
                "data_dir": ".ferry-dev",
                "demo": False,
            },
        ),
        (
            [
                "--workers",
                "3",
                "--portal-port",
                "0",
                "--kafka-port",
                "0",
                "--zk-port",
                "0",
                "--data-dir",
                "/tmp/x",
                "--demo",
            ],
            {"workers": 3, "portal_port": 0, "kafka_port": 0, "zk_port": 0, "data_dir": "/tmp/x", "demo": True},
        ),
    ],
)
def test_dev_flags_and_contract_defaults(argv: list[str], expected: dict[str, object]) -> None:
    args = build_parser().parse_args(["dev", *argv])
    assert {k: getattr(args, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("orders", ("orders", 1)), ("orders:3", ("orders", 3)), ("a.b_c-d:1000", ("a.b_c-d", 1000))],
)
def test_topic_flag(text: str, expected: tuple[str, int]) -> None:
    assert dev.parse_topic(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bad topic", "is not a Kafka topic name"),
        ("..", "is not a Kafka topic name"),
        (":3", "is not a Kafka topic name"),
        ("x:0", "must be 1-1000"),
        ("x:", "must be 1-1000"),
        ("x:1001", "must be 1-1000"),
        ("x:three", "must be 1-1000"),
    ],
)
def test_a_bad_topic_flag_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--topic: .*{message}"):
        dev.parse_topic(text)


def test_a_busy_port_leaves_the_running_stacks_state_alone(tmp_path: Path) -> None:
    """A second ``ferry dev`` on the same data directory, refused for a busy port, must not delete
    the state.json of the stack that is running there."""
    state = tmp_path / "state.json"
    state.write_text('{"portal_url": "http://127.0.0.1:8080"}')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        args = build_parser().parse_args(["dev", "--data-dir", str(tmp_path), "--zk-port", str(taken)])
        with pytest.raises(ConfigError, match=r"--zk-port: port .* is already in use"):
            dev.DevStack(config.load(env={}), args).start()
    assert state.read_text() == '{"portal_url": "http://127.0.0.1:8080"}'


@pytest.mark.parametrize("argv", [["--config", "ferry.toml", "dev"], ["dev", "--config", "ferry.toml"]])
def test_services_get_the_config_file_of_ferry_dev(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    stack = dev.DevStack(config.load(env={}), build_parser().parse_args(argv))
    assert stack.service_argv("worker") == ["-m", "ferry.cli", "worker", "--config", str(tmp_path / "ferry.toml")]


def test_services_without_a_config_file() -> None:
    stack = dev.DevStack(config.load(env={}), build_parser().parse_args(["dev"]))
    assert stack.service_argv("portal") == ["-m", "ferry.cli", "portal"]


def test_one_port_for_two_services_is_refused_naming_both(tmp_path: Path) -> None:
    """Otherwise one service fails to listen while the other answers for both, and the stack even
    looks ready (the portal's and gateway's /healthz answered by the same process)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    flags = {"--zk-port": 0, "--kafka-port": 0, "--portal-port": free, "--gateway-port": free}
    with pytest.raises(ConfigError, match=f"--gateway-port: port {free} is also given to --portal-port"):
        dev.resolve_ports(flags)
    args = build_parser().parse_args(["dev", "--data-dir", str(tmp_path), "--portal-port", str(free)])
    args.gateway_port = free
    with pytest.raises(ConfigError, match="--gateway-port"):
        dev.DevStack(config.load(env={}), args).start()


def test_free_ports_avoid_the_ports_given(monkeypatch: pytest.MonkeyPatch) -> None:
    picks = iter([5001, 5002, 5003, 5004])  # 5001 is free now, but --kafka-port's
    monkeypatch.setattr(embedded, "free_port", lambda: next(picks))
    monkeypatch.setattr(embedded, "port_open", lambda port: False)
    ports = dev.resolve_ports({"--zk-port": 0, "--kafka-port": 5001, "--portal-port": 0, "--gateway-port": 0})
    assert ports == {"--zk-port": 5002, "--kafka-port": 5001, "--portal-port": 5003, "--gateway-port": 5004}


def test_a_data_dir_that_is_a_file_is_refused_naming_the_flag(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    args = build_parser().parse_args(["dev", "--data-dir", str(not_a_dir), "--zk-port", "0", "--kafka-port", "0"])
    args.portal_port = args.gateway_port = 0
    with pytest.raises(ConfigError, match=r"--data-dir: cannot use .*: File exists"):
        dev.DevStack(config.load(env={}), args).start()
