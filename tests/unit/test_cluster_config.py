"""The cluster's settings without a server: how many copies a stream gets, what a bad
$CAIRN_REPLICAS says, which routes each member dials, and `cairn up --cluster` bounds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cairn import subjects
from cairn.bus._replicas import REPLICAS_ENV, configured_replicas, replicas_for
from cairn.bus._streams import stream_config
from cairn.cli.up import up
from cairn.errors import InvalidInput
from cairn.runtime._cluster import LEASE_TTL_S, NatsCluster, check_size, cluster_block
from cairn.runtime.embedded import EmbeddedFederation
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.standby import TTL_ENV


@pytest.mark.parametrize(("servers", "copies"), [(1, 1), (2, 2), (3, 3), (5, 3), (7, 3)])
def test_a_cluster_keeps_at_most_three_copies(servers: int, copies: int) -> None:
    assert replicas_for(servers) == copies


def test_replicas_come_from_the_environment_and_default_to_one() -> None:
    assert configured_replicas({}) == 1
    assert configured_replicas({REPLICAS_ENV: " 3 "}) == 3
    spec = subjects.study_stream("demo")
    assert stream_config(spec, configured_replicas({REPLICAS_ENV: "3"})).num_replicas == 3
    assert stream_config(spec).num_replicas == 1


@pytest.mark.parametrize("raw", ["0", "6", "three", "-1", "2.5"])
def test_a_bad_replicas_setting_names_the_variable_and_the_range(raw: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        configured_replicas({REPLICAS_ENV: raw})
    assert f"${REPLICAS_ENV}={raw!r}" in str(caught.value)
    assert "1 to 5" in str(caught.value)


def test_each_member_dials_every_other_over_verified_tls(tmp_path: Path) -> None:
    text = cluster_block(host="127.0.0.1", route_port=6001, peers=[6002, 6003],
                         cert=tmp_path / "r.pem", key=tmp_path / "r.key", ca=tmp_path / "ca.pem")
    assert '"127.0.0.1:6001"' in text
    assert '"nats-route://127.0.0.1:6002", "nats-route://127.0.0.1:6003"' in text
    assert "6001\"" not in text.split("routes:", 1)[1], "a member does not route to itself"
    assert "verify: true" in text


@pytest.mark.parametrize("size", [0, 8])
def test_a_cluster_size_out_of_range_is_refused(size: int) -> None:
    with pytest.raises(InvalidInput, match="1 to 7"):
        check_size(size)


def test_cairn_up_refuses_an_insecure_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(up, ["--dir", str(tmp_path / "fed"), "--cluster", "3",
                                     "--insecure", "--check"])
    assert result.exit_code == 2, result.output
    assert "--cluster runs only secure" in result.output
    assert not (tmp_path / "fed" / "nats").exists(), "nothing was started"


def test_a_clusters_leases_outlive_an_election_unless_the_operator_says_otherwise(
        tmp_path: Path) -> None:
    """A lease whose bucket lost its leader must outlast the election (4.7-7.7 s measured),
    else its holder restarts whenever the server it was renewed on dies."""
    cluster = EmbeddedFederation(dir=tmp_path / "fed", cluster_size=3)
    cluster.cluster = NatsCluster.of(cluster)
    cluster.nats = cluster.cluster.members[0]
    env = cluster._env()
    assert float(env[TTL_ENV]) == LEASE_TTL_S >= 10
    cluster.extra_env[TTL_ENV] = "4"
    assert cluster._env()[TTL_ENV] == "4"
    single = EmbeddedFederation(dir=tmp_path / "one")
    single.nats = NatsServer(tmp_path / "one" / "nats")
    assert TTL_ENV not in single._env() or single._env()[TTL_ENV] == os.environ.get(TTL_ENV)
