"""A site's leaf node config and the rights a site needs behind one (no network)."""

from __future__ import annotations

import stat
from pathlib import Path

from cairn.runtime.leaf import LeafNode, ServerTls, hub_leafnodes_block, render_leaf
from cairn.runtime.leafanchor import anchored_subjects
from cairn.state.study import StudyState
from cairn.subjects.table import js_domain_api, reply_inbox, reply_inboxes
from cairn.trust.credentials import Identity, Kind
from cairn.trust.permissions import Membership, covers, derive, holder_of, inbox_prefix


def tls(tmp_path: Path) -> ServerTls:
    return ServerTls(cert=tmp_path / "s.pem", key=tmp_path / "s.key", ca=tmp_path / "ca.pem")


def test_the_leaf_dials_with_the_credential_and_checks_the_federation_ca(
        tmp_path: Path) -> None:
    text = render_leaf(site="site-a", host="127.0.0.1", port=4333, monitor_port=8333,
                       hub_leaf_url="tls://10.0.0.1:7422", creds=tmp_path / "site.creds",
                       token="eyJ.jwt.sig", tls=tls(tmp_path))
    # The authority reads the credential from the CONNECT token: the URL's user part.
    assert '"tls://eyJ.jwt.sig@10.0.0.1:7422"' in text
    assert f'credentials: "{(tmp_path / "site.creds").resolve()}"' in text
    assert f'tls: {{ ca_file: "{(tmp_path / "ca.pem").resolve()}"' in text
    assert 'listen: "127.0.0.1:4333"' in text


def test_the_leaf_config_is_for_its_user_alone(tmp_path: Path) -> None:
    leaf = LeafNode(site="site-a", dir=tmp_path / "leaf", hub_leaf_url="nats://127.0.0.1:1",
                    creds=None, tls=None, port=4444)
    path = leaf.write_config(monitor_port=8444)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert leaf.url == "nats://127.0.0.1:4444"


def test_the_federation_listens_for_leaves_with_tls(tmp_path: Path) -> None:
    block = hub_leafnodes_block("127.0.0.1", 7422, tls(tmp_path))
    assert 'listen: "127.0.0.1:7422"' in block and "ca_file" in block


def site_rights(site: str) -> tuple[str, ...]:
    membership = {"demo": Membership(sites=frozenset({"hub", "site-a", "site-b"}))}
    holder = holder_of(Identity(kind=Kind.SITE, name=site, site=site), membership)
    return derive(holder, inbox_prefix("UKEY")).pub_allow


def test_a_site_may_answer_only_requests_made_to_it() -> None:
    rights = site_rights("site-a")
    assert reply_inboxes("cairn.health.*.site-a") in rights
    assert reply_inboxes("cairn.api.site.site-a.logs") in rights
    assert not any(r.startswith("_INBOX.") and "site-b" in r for r in rights)
    # The inbox a request is answered on names the subject asked.
    assert reply_inbox("_INBOX.K", "cairn.health.agent.site-a", "t1") == (
        "_INBOX.K.cairn.health.agent.site-a.t1")


def test_a_site_has_its_jetstream_rights_under_the_domain_and_no_more() -> None:
    rights = site_rights("site-a")
    plain = [r for r in rights if r.startswith("$JS.API.")]
    under = {r for r in rights if r.startswith("$JS.cairn.API.") and ".$KV." not in r}
    assert plain and under == {js_domain_api(r) for r in plain}
    assert "$JS.cairn.API.$KV.sites.site-a" in rights


def test_a_right_covers_a_subscription_only_when_it_matches_all_the_subscription_does() -> None:
    assert covers("cairn.study.*.job.>", "cairn.study.demo.job.*.site.site-a.accepted")
    assert covers("cairn.study.demo.job.*.done", "cairn.study.demo.job.*.done")
    assert not covers("cairn.study.demo.job.j1.done", "cairn.study.demo.job.*.done")
    assert not covers("cairn.study.demo.*", "cairn.study.demo.>")
    assert not covers("cairn.study.demo.x", "cairn.study.demo")
    assert not covers("cairn.study.demo", "cairn.study.demo.x")
    assert not covers("cairn.study.>", "cairn.study")


def test_the_anchors_ask_only_for_what_the_hub_may_subscribe_to() -> None:
    studies = {"demo": StudyState(name="demo", sites=("hub", "site-a", "site-b"))}
    anchored = anchored_subjects("site-a", studies, "hub")
    # The stored subjects whose rights hold a wildcard the leaf cannot match are anchored ...
    assert "cairn.study.demo.job.*.site.site-a.accepted" in anchored
    # ... the hub's own buckets and the site's request subjects are not (refused the hub).
    assert "$KV.sites.site-a" not in anchored
    assert not [s for s in anchored if s.startswith("cairn.api.site.")]
    hub = derive(holder_of(Identity(kind=Kind.HUB, name="hub", site="hub"),
                           {"demo": Membership(sites=frozenset(studies["demo"].sites))}),
                 inbox_prefix("UKEY")).sub_allow
    assert all(any(covers(right, s) for right in hub) for s in anchored)
