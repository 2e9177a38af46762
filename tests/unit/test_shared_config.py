"""Settings: defaults, file + env precedence, and errors that name the setting to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry import config
from ferry.errors import ConfigError


def test_defaults_match_contract() -> None:
    s = config.load(env={})
    assert s.zookeeper.connect == "127.0.0.1:2181"
    assert s.cluster == "default"
    assert s.kafka.bootstrap == "127.0.0.1:9092"
    assert s.kafka.config == {}
    assert s.database.url == "sqlite:///ferry.db"
    assert s.kafka.offsets_topic == "__ferry_offsets"
    assert s.portal.admin_token in (None, "")
    assert s.portal.endpoint_allow == ()


def test_env_wins_over_file(tmp_path: Path) -> None:
    f = tmp_path / "ferry.toml"
    f.write_text('FERRY_CLUSTER = "from-file"\nkafka_bootstrap = "file:9092"\nportal_port = 9000\n')
    s = config.load(f, env={"FERRY_CLUSTER": "from-env"})
    assert s.cluster == "from-env"
    assert s.kafka.bootstrap == "file:9092"
    assert s.portal.port == 9000


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"FERRY_PORTAL_PORT": "http"}, "FERRY_PORTAL_PORT"),
        ({"FERRY_PORTAL_PORT": "70000"}, "FERRY_PORTAL_PORT"),
        ({"FERRY_KAFKA_CONFIG": "[1]"}, "FERRY_KAFKA_CONFIG"),
        ({"FERRY_KAFKA_CONFIG": "{not json"}, "FERRY_KAFKA_CONFIG"),
        ({"FERRY_CLUSTER": "a/b"}, "FERRY_CLUSTER"),
        ({"FERRY_ZK_SESSION_TIMEOUT_MS": "0"}, "FERRY_ZK_SESSION_TIMEOUT_MS"),
        ({"FERRY_LOG_FORMAT": "xml"}, "FERRY_LOG_FORMAT"),
        ({"FERRY_TXN_LINGER_MS": "-1"}, "FERRY_TXN_LINGER_MS"),
        ({"FERRY_TXN_STICKY_MS": "-1"}, "FERRY_TXN_STICKY_MS"),
        ({"FERRY_KAFKA_BOOTSTRAP": ""}, "FERRY_KAFKA_BOOTSTRAP"),
        ({"FERRY_OFFSETS_TOPIC": ""}, "FERRY_OFFSETS_TOPIC"),
        ({"FERRY_OFFSETS_TOPIC": "offsets/of ferry"}, "FERRY_OFFSETS_TOPIC"),
        ({"FERRY_ENDPOINT_ALLOW": "10.0.0.0/33"}, "FERRY_ENDPOINT_ALLOW"),
        ({"FERRY_WORKER_ID": "dc1/worker-1"}, "FERRY_WORKER_ID"),
        ({"FERRY_WORKER_ID": ".."}, "FERRY_WORKER_ID"),
        ({"FERRY_ENDPOINT_ALLOW": "*.svc, 10.0.0/8"}, "FERRY_ENDPOINT_ALLOW"),
        ({"FERRY_KAFKA_CONFIG": '{"no.such.property": "x"}'}, "FERRY_KAFKA_CONFIG"),
        ({"FERRY_KAFKA_CONFIG": '{"fetch.max.bytes": {"a": 1}}'}, "FERRY_KAFKA_CONFIG"),
        (
            {"FERRY_KAFKA_CLUSTERS": '{"dc2": {"bootstrap": "k:9092", "config": {"acks": "most"}}}'},
            "FERRY_KAFKA_CLUSTERS.dc2.config",
        ),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(env=env)
    assert err.value.setting == setting
    assert setting in str(err.value)


def test_unknown_file_key_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "ferry.toml"
    f.write_text("zk_conect = 'x'\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        config.load(f, env={})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml", env={})


def test_describe_masks_secrets() -> None:
    s = config.load(
        env={
            "FERRY_ADMIN_TOKEN": "tok-123",
            "FERRY_DB_URL": "mysql+pymysql://u:pw@db/ferry",
            "FERRY_KAFKA_CONFIG": '{"sasl.password": "s3"}',
        }
    )
    shown = config.describe(s)
    text = repr(shown)
    for secret in ("tok-123", "pw@db", "s3"):
        assert secret not in text
    assert shown["FERRY_CLUSTER"] == "default"


def test_kafka_client_config_merges_extra_settings() -> None:
    s = config.load(env={"FERRY_KAFKA_CONFIG": '{"security.protocol": "SASL_SSL"}'})
    cfg = s.kafka.client_config(**{"group.id": "g"})
    assert cfg["bootstrap.servers"] == "127.0.0.1:9092"
    assert cfg["security.protocol"] == "SASL_SSL"
    assert cfg["group.id"] == "g"


@pytest.mark.parametrize(("raw", "token"), [("s3cret\n", "s3cret"), ("  s3cret ", "s3cret"), (" \n", "")])
def test_the_admin_token_is_taken_without_surrounding_whitespace(raw: str, token: str) -> None:
    """A token from a Secret's file often ends with a newline, which no Authorization header can
    carry: kept, the portal would start with an admin token nobody can send."""
    assert config.load(env={"FERRY_ADMIN_TOKEN": raw}).portal.admin_token == token


def test_librdkafka_settings_of_any_client_are_accepted() -> None:
    """Producer and consumer settings share FERRY_KAFKA_CONFIG; what only a real client can judge
    (here a SASL mechanism this librdkafka lacks) is left to the clients."""
    raw = '{"fetch.max.bytes": 1048576, "group.id": "g", "linger.ms": 5, "security.protocol": "SASL_SSL"}'
    assert config.load(env={"FERRY_KAFKA_CONFIG": raw}).kafka.config["linger.ms"] == 5


def test_a_refused_librdkafka_value_is_not_echoed_when_secret() -> None:
    raw = '{"security.protocol": "p4ssw0rd-x", "sasl.password": "p4ssw0rd-x"}'
    with pytest.raises(ConfigError, match="FERRY_KAFKA_CONFIG: librdkafka refuses") as err:
        config.load(env={"FERRY_KAFKA_CONFIG": raw})
    assert "p4ssw0rd-x" not in str(err.value)


def test_endpoint_allow_takes_cidrs_and_host_patterns() -> None:
    allow = "10.0.0.0/8, fd00::/8,*.svc.cluster.local, billing"
    assert config.load(env={"FERRY_ENDPOINT_ALLOW": allow}).portal.endpoint_allow == (
        "10.0.0.0/8",
        "fd00::/8",
        "*.svc.cluster.local",
        "billing",
    )


@pytest.mark.parametrize(
    ("content", "message"), [(None, "cannot read .*: Is a directory"), (b"\xff\xfe", "not valid TOML")]
)
def test_an_unreadable_config_file_is_a_config_error(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "ferry.toml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as err:
        config.load(path, env={})
    assert err.value.setting == "--config"
