"""Every file a `cairn` command reads, handed garbage: not UTF-8, `/dev/zero`, a file past
every limit, a YAML alias bomb, a text that is no JWT, an empty file, a FIFO with no writer.
Each is the real command line (`cairn.cli.main`, in a fork of one interpreter that imported
it: `cli_fork`), held to 768 MiB of address space and a time limit; each must end with exit
3 and one line on stderr naming the file, no traceback, nothing written."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from cairn.evidence.keys import SigningKey
from cairn.evidence.trust import trust_entry
from cairn.spec.federation import parse_federation
from cairn.trust.provision import provision, request_site, sign_site_request
from tests.integration.cli_fork import ForkedCommand, run_forked

FED = """\
federation: fed
hub: hub
sites: [{name: hub, org: coord}, {name: site-a, org: org-a}]
admins: [{name: alice@org-a, org: org-a, role: lead}]
studies: {s1: {sites: [hub, site-a], admins: [alice@org-a]}}
"""
# Nine levels of nine aliases: 9**9 (387 million) strings once expanded, in 600 bytes.
BOMB = "site: bomb\na: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True))
PAST_EVERY_LIMIT = 80 * 1024 * 1024  # sparse: costs nothing to make
ADDRESS_SPACE = 768 * 1024 * 1024
TIME_LIMIT_S = 10.0  # each command line; a fork starts in milliseconds


def _hostile(kind: str, where: Path) -> Path:
    path = where / f"hostile-{kind}"
    match kind:
        case "dev-zero":
            return Path("/dev/zero")
        case "fifo":
            os.mkfifo(path)
        case "oversized":
            with open(path, "wb") as f:
                f.truncate(PAST_EVERY_LIMIT)
        case "not-utf8":
            path.write_bytes(b"\xff\xfe\xfa caf\xe9 \x80\n")
        case "alias-bomb":
            path.write_text(BOMB)
        case "not-a-jwt":
            path.write_text("this is not a JWT.nor.a credential\n")
        case "empty":
            path.write_bytes(b"")
    return path


KINDS = ("not-utf8", "dev-zero", "oversized", "alias-bomb", "not-a-jwt", "empty", "fifo")


@dataclass
class World:
    """A provisioned federation and a site kit: the good files around each bad one."""

    root: Path
    fed: Path
    out: Path
    kit: Path
    jwt: Path
    request: Path
    trust: Path

    def kit_listing(self) -> list[str]:
        return sorted(str(p.relative_to(self.kit)) for p in self.kit.rglob("*"))


def _world(root: Path) -> World:
    fed = root / "federation.yaml"
    fed.write_text(FED)
    out = root / "trust"
    provision(parse_federation(FED), out, url="tls://x:1", hosts=["127.0.0.1"], port=1)
    kit = root / "site-kit"
    request = request_site("site-a", "org-a", kit)
    jwt = root / "site-a.jwt"
    jwt.write_text(sign_site_request(out, request, parse_federation(FED)) + "\n")
    trust = root / "trust.yaml"
    key = SigningKey.generate()
    trust.write_text(yaml.safe_dump({"signers": [trust_entry("s", "site", key.verifying_key)]}))
    return World(root, fed, out, kit, jwt, request, trust)


def _in_folder(name: str) -> Callable[[World, Path, Path], Path]:
    """A folder (made for the case) whose file `name` is the hostile one, by link."""
    def make(w: World, bad: Path, case_dir: Path) -> Path:
        target = case_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(bad)
        return case_dir
    return make


# name -> argv, with {bad} the hostile file (or folder holding it) and the world's files.
COMMANDS: dict[str, Callable[[World, str], list[str]]] = {
    "provision-federation": lambda w, bad: ["provision", bad, "--out", str(w.root / "new-out")],
    "sign-request": lambda w, bad: ["provision", "sign", bad, "--root", str(w.out),
                                    "--federation", str(w.fed), "--out", str(w.root / "x.jwt")],
    "sign-federation": lambda w, bad: ["provision", "sign", str(w.request), "--root",
                                       str(w.out), "--federation", bad,
                                       "--out", str(w.root / "x.jwt")],
    "accept-jwt": lambda w, bad: ["provision", "accept", bad, "-k", str(w.kit), "--ca",
                                  str(w.out / "ca" / "ca.pem"), "--root-pub",
                                  str(w.out / "root" / "root.pub"), "--url", "tls://x:1"],
    "accept-ca": lambda w, bad: ["provision", "accept", str(w.jwt), "-k", str(w.kit), "--ca",
                                 bad, "--root-pub", str(w.out / "root" / "root.pub"),
                                 "--url", "tls://x:1"],
    "accept-root-pub": lambda w, bad: ["provision", "accept", str(w.jwt), "-k", str(w.kit),
                                       "--ca", str(w.out / "ca" / "ca.pem"), "--root-pub", bad,
                                       "--url", "tls://x:1"],
    "check-creds": lambda w, bad: ["provision", "check", bad, "--roots",
                                   str(w.out / "root" / "root.pub")],
    "check-roots": lambda w, bad: ["provision", "check",
                                   str(w.out / "kits" / "alice@org-a" / "admin.creds"),
                                   "--roots", bad],
    "revoke-list": lambda w, bad: ["provision", "revoke", "site-a", "--root", bad],
    "evidence-bundle": lambda w, bad: ["evidence", "verify", bad, "--trust", str(w.trust)],
    "evidence-trust": lambda w, bad: ["evidence", "verify", str(w.fed), "--trust", bad],
    "evidence-revoked": lambda w, bad: ["evidence", "verify", str(w.fed), "--trust",
                                        str(w.trust), "--revoked", bad],
    "evidence-submit": lambda w, bad: ["evidence", "submit", bad],
    "evidence-status-trust": lambda w, bad: ["evidence", "status", "--trust", bad],
    "run-site-config": lambda w, bad: ["run", "agent", "--site-config", bad],
    "snapshot-diff": lambda w, bad: ["diff", bad, bad],
    "bundle-checksums": lambda w, bad: ["bundle", "verify", bad],
}
PRELOAD = ("provision", "evidence", "run", "diff", "bundle")
# Commands whose hostile file sits inside a folder the command is given.
FOLDERS = {"revoke-list": _in_folder("authority/revoked.json"),
           "bundle-checksums": _in_folder("checksums.txt")}


@dataclass
class Outcome:
    argv: list[str]
    shown: str
    code: int | None
    stderr: str
    seconds: float


@dataclass
class Ran:
    outcomes: dict[tuple[str, str], Outcome]
    world: World
    kit_before: list[str]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    root = tmp_path_factory.mktemp("hostile")
    world = _world(root)
    before = world.kit_listing()
    jobs: dict[tuple[str, str], tuple[list[str], str]] = {}
    for kind in KINDS:
        bad = _hostile(kind, root)
        for name, argv_of in COMMANDS.items():
            shown = str(bad)
            target = str(bad)
            if name in FOLDERS:
                folder = FOLDERS[name](world, bad, root / f"{name}-{kind}")
                target = str(folder)
                shown = str(next(p for p in folder.rglob("*") if p.is_symlink()))
            jobs[(name, kind)] = (argv_of(world, target), shown)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root),
           "CAIRN_CONTEXT": str(root / "no-context.yaml")}
    keys = list(jobs)
    ran = run_forked([ForkedCommand(argv=jobs[k][0], cwd=root, env=env,
                                    address_space=ADDRESS_SPACE, time_limit_s=TIME_LIMIT_S)
                      for k in keys], parallel=4, preload=PRELOAD)
    results = {key: Outcome(jobs[key][0], jobs[key][1], r.code, r.stderr, r.seconds)
               for key, r in zip(keys, ran, strict=True)}
    yield Ran(results, world, before)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_hostile_file_is_one_line_and_exit_3(ran: Ran, command: str, kind: str) -> None:
    got = ran.outcomes[(command, kind)]
    where = f"cairn {' '.join(got.argv)}\n{got.stderr}"
    assert got.code is not None, f"no end within {TIME_LIMIT_S:g}s: {where}"
    assert "Traceback" not in got.stderr, where
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1, where
    assert lines[0].startswith(f"error: {got.shown}"), where
    assert got.code == 3, where


def test_nothing_was_written(ran: Ran) -> None:
    """No kit file changed (`accept` checks every file before it writes), no provisioning
    folder or credential was made."""
    assert ran.world.kit_listing() == ran.kit_before
    assert not (ran.world.root / "new-out").exists()
    assert not (ran.world.root / "x.jwt").exists()
