"""The ZooKeeper layout, in one place. Everything lives under ``/ferry/<cluster>``.

/ferry/<cluster>/
  election/                      kazoo Election of the coordinators (leader holds the lowest node)
  leader                         ephemeral: {"id", "host", "since"} of the current leader
  workers/<worker_id>            ephemeral: {"id", "host", "since", "metrics_url", "zone"}
  assignments/<worker_id>        persistent, written by the leader:
                                   {"generation": n, "partitions": [{"subscription", "topic", "partition",
                                   "cluster"? (absent: default), "start"?}], "subscriptions": {name: document
                                   (header values included:
                                   workers need them; ZK ACLs protect them)}}; "start": "earliest" marks a
                                   partition a start_from=latest subscription met after it started
  subscriptions/<name>           persistent, written by the leader: {"name", "partitions_at_start":
                                   {topic: partitions when the subscription first met it}}
                                   (coordinator.starts; dropped with the subscription)
  subscriptions-changed          persistent; the portal sets it after each change, the leader watches it
  partitions/<sub>/<topic>[@<kafka cluster>]/<p>/epoch   persistent: the ownership epoch, an integer, bumped with
                                   compare-and-set (znode version) by whoever takes ownership
  partitions/<sub>/<topic>/<p>/owner   ephemeral: {"worker", "epoch"} while a worker owns it
  stats/<worker_id>              ephemeral: the worker's live per-partition figures, refreshed every ~2 s
"""

from __future__ import annotations

from urllib.parse import quote

ROOT = "/ferry"


def _seg(value: str) -> str:
    # Topic and subscription names cannot hold '/', but quote anyway so a path can never be forged.
    return quote(value, safe="._-")


def cluster(name: str) -> str:
    return f"{ROOT}/{_seg(name)}"


def election(c: str) -> str:
    return f"{cluster(c)}/election"


def leader(c: str) -> str:
    return f"{cluster(c)}/leader"


def workers(c: str) -> str:
    return f"{cluster(c)}/workers"


def worker(c: str, worker_id: str) -> str:
    return f"{workers(c)}/{_seg(worker_id)}"


def assignments(c: str) -> str:
    return f"{cluster(c)}/assignments"


def assignment(c: str, worker_id: str) -> str:
    return f"{assignments(c)}/{_seg(worker_id)}"


def subscriptions(c: str) -> str:
    return f"{cluster(c)}/subscriptions"


def subscription(c: str, name: str) -> str:
    return f"{subscriptions(c)}/{_seg(name)}"


def subscriptions_changed(c: str) -> str:
    return f"{cluster(c)}/subscriptions-changed"


def partition(c: str, sub: str, topic: str, p: int, kafka_cluster: str = "default") -> str:
    # A partition of another Kafka cluster: ``<topic>@<cluster>`` ('@' is in no topic name), so
    # the default cluster's paths are as they always were.
    where = _seg(topic) if kafka_cluster == "default" else f"{_seg(topic)}@{_seg(kafka_cluster)}"
    return f"{cluster(c)}/partitions/{_seg(sub)}/{where}/{int(p)}"


def epoch(c: str, sub: str, topic: str, p: int, kafka_cluster: str = "default") -> str:
    return f"{partition(c, sub, topic, p, kafka_cluster)}/epoch"


def owner(c: str, sub: str, topic: str, p: int, kafka_cluster: str = "default") -> str:
    return f"{partition(c, sub, topic, p, kafka_cluster)}/owner"


def stats(c: str) -> str:
    return f"{cluster(c)}/stats"


def worker_stats(c: str, worker_id: str) -> str:
    return f"{stats(c)}/{_seg(worker_id)}"
