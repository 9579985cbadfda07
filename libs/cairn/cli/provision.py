"""`cairn provision ...`: a root of trust, identities and startup kits (see docs/security.md).

Central: `cairn provision federation.yaml --out DIR` makes everything. Distributed: the site
runs `cairn provision request`, the project admin `cairn provision sign`, the site
`cairn provision accept`; the site's private keys never leave it. `cairn provision reader`
makes the kit of an outside system that reads one study.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cairn.cli.output import Column, emit, output_option, print_table
from cairn.spec.federation import load_federation
from cairn.trust import provision as prov


class ProvisionGroup(click.Group):
    """`cairn provision FILE --out DIR` runs the default command; the rest are subcommands."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["all", *args]
        return super().resolve_command(ctx, args)


@click.group(cls=ProvisionGroup, help=(
    "Provision the federation's root of trust, identities and startup kits.\n\n"
    "`cairn provision federation.yaml --out DIR` writes everything (run it again after adding "
    "sites or admins: only missing kits are made). Distributed provisioning: a site runs "
    "`request`, the project admin `sign`, the site `accept`."))
def provision() -> None:
    pass


SIGN_HELP = """At the project admin: sign a site's request.

\b
Exit codes: 0 signed; 3 a file is unreadable, too large or not what it
should be (the message names it); 4 the site is not in federation.yaml;
6 it is, under another org.
"""

ACCEPT_HELP = """At a site: put the signed credential beside its keys. Every file is read
and checked (the credential against the root key, and against the kit's own
key) before anything is written into the kit.

\b
Exit codes: 0 done; 3 a file is unreadable, too large or not what it should
be (the message names it); 5 the credential does not verify against the
root; 6 it was signed for another key than the kit's.
"""

CHECK_HELP = """Verify a kit's credential against the federation root.

\b
Exit codes: 0 valid; 3 a file is unreadable, too large or not what it should
be (the message names it); 9 the credential does not verify against the
roots (the reason is printed).
"""


@provision.command("all", help="Write the root, CA, server config and every missing kit.")
@click.argument("federation_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="Folder for the root of trust and the kits (keep root/ offline).")
@click.option("--url", default=None, metavar="URL",
              help="The federation's NATS URL as clients reach it (default tls://HOST:PORT).")
@click.option("--host", "hosts", multiple=True, default=("localhost", "127.0.0.1"),
              show_default=True, help="Names and addresses in the server certificate.")
@click.option("--port", default=4222, show_default=True, help="The server's client port.")
@output_option()
def provision_all(federation_file: Path, out: Path, url: str | None, hosts: tuple[str, ...],
                  port: int, output: str) -> None:
    fed = load_federation(federation_file)
    url = url or f"tls://{hosts[0]}:{port}"
    made = prov.provision(fed, out, url=url, hosts=list(hosts), port=port)
    data = {"out": str(out), "server_config": str(out / "server" / "nats.conf"),
            "kits": [{"kit": p.name, "path": str(p)} for p in made]}
    emit(data, output, lambda d: print_table(
        f"{len(made)} new kit(s) under {out}; server config {d['server_config']}",
        [Column("kit", keep=True), Column("path", keep=True)],
        [(k["kit"], k["path"]) for k in d["kits"]]))


@provision.command("request", help=(
    "At a site: make its keys (kept in KIT) and a request with only the public keys."))
@click.option("--site", required=True, help="The site's name, as in federation.yaml.")
@click.option("--org", required=True, help="The site's organisation.")
@click.option("-k", "--kit", required=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="The site's kit folder (its private keys stay here).")
def request(site: str, org: str, kit: Path) -> None:
    path = prov.request_site(site, org, kit)
    click.echo(f"send {path} to the project admin (it holds public keys only)")


@provision.command("sign", help=SIGN_HELP, short_help="At the project admin: sign a site's "
                   "request.")
@click.argument("request_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--root", "root_dir", required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The provisioning folder (`--out` of `cairn provision`).")
@click.option("--federation", "federation_file", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="federation.yaml: the site must be in it.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="Where to write the signed credential (a JWT) for the site.")
def sign(request_file: Path, root_dir: Path, federation_file: Path, out: Path) -> None:
    jwt = prov.sign_site_request(root_dir, request_file, load_federation(federation_file))
    out.write_text(jwt + "\n")
    click.echo(f"send {out}, {root_dir / 'ca' / 'ca.pem'} and {root_dir / 'root' / 'root.pub'}"
               " back to the site")


@provision.command("accept", help=ACCEPT_HELP,
                   short_help="At a site: put the signed credential beside its keys.")
@click.argument("jwt_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("-k", "--kit", required=True, type=click.Path(file_okay=False, exists=True,
                                                          path_type=Path),
              help="The kit folder of `cairn provision request`.")
@click.option("--ca", required=True, type=click.Path(dir_okay=False, exists=True,
                                                     path_type=Path),
              help="The federation CA (ca.pem) from the project admin.")
@click.option("--root-pub", required=True, type=click.Path(dir_okay=False, exists=True,
                                                           path_type=Path),
              help="The federation root's public key (root.pub) from the project admin.")
@click.option("--url", required=True, help="The federation's NATS URL.")
@click.option("--federation", "federation_name", default="federation",
              help="The federation's name (for the kit's notes).")
def accept(jwt_file: Path, kit: Path, ca: Path, root_pub: Path, url: str,
           federation_name: str) -> None:
    # Everything is read and checked before anything is written into the kit.
    signed = prov.read_signed_site(kit, jwt_file, ca, root_pub)
    creds = prov.accept_site(kit, signed, url=url, federation=federation_name)
    identity = prov.check_kit(creds, kit / "roots.txt")
    click.echo(f"{creds}: {identity.kind.value} {identity.name} (verified against the root)")


@provision.command("reader", help=(
    "Write the startup kit of a reader: an outside system that may read one study's event "
    "stream (with --data also its data plane and job files), and nothing else. NAME is "
    "name@org and must be no other identity's name. Run again: an existing reader is left "
    "as it is. Revoke it with `cairn provision revoke NAME`. See docs/events.md."))
@click.argument("name")
@click.option("--study", required=True, metavar="STUDY", help="The one study it reads.")
@click.option("--data", is_flag=True,
              help="Also the study's data plane (`DATA_<study>`) and job files (`FILES_<study>`).")
@click.option("--root", "root_dir", required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The provisioning folder (`--out` of `cairn provision`; `.cairn/trust` "
                   "of `cairn up`).")
@click.option("--out", "out", default=None, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the kit (default ROOT/kits/NAME, where its record stays "
                   "in any case).")
@click.option("--url", default=None, metavar="URL",
              help="The federation's NATS URL as the reader reaches it (default: the URL in "
                   "ROOT's other kits).")
@output_option()
def reader(name: str, study: str, data: bool, root_dir: Path, out: Path | None,
           url: str | None, output: str) -> None:
    from cairn.trust.readers import reader_kit

    kit = reader_kit(root_dir, name, study=study, data=data, out=out, url=url)
    meta = kit.meta
    result = {"name": name, "study": meta.get("study"), "data": bool(meta.get("data")),
              "made": kit.made, "kit": str(kit.dir), "creds": str(kit.creds),
              "context": str(kit.context),
              "streams": [s["name"] for s in meta.get("streams", [])]}

    def table(d: dict[str, Any]) -> None:
        reads = "events, data plane and job files" if d["data"] else "events"
        state = "new" if d["made"] else "exists already, left as it was"
        click.echo(f"reader {name} ({state}): reads study {d['study']}'s {reads}")
        click.echo(f"  kit:     {d['kit']}")
        click.echo(f"  streams: {', '.join(d['streams'])}")
        click.echo(f"  try it:  CAIRN_CONTEXT={d['context']} cairn events tail")

    emit(result, output, table)


@provision.command("revoke", help=(
    "Refuse a site, admin, reader or worker launch id from now on; the authority applies it "
    "within a second and disconnects it."))
@click.argument("name")
@click.option("--root", "root_dir", required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The provisioning folder (its authority/revoked.json).")
def revoke(name: str, root_dir: Path) -> None:
    path = prov.revoke(root_dir, name)
    click.echo(f"{name} revoked ({path})")


@provision.command("check", help=CHECK_HELP,
                   short_help="Verify a kit's credential against the federation root.")
@click.argument("creds", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--roots", required=True, type=click.Path(dir_okay=False, exists=True,
                                                        path_type=Path),
              help="roots.txt (or root.pub): the trusted root public keys.")
@output_option()
def check(creds: Path, roots: Path, output: str) -> None:
    import msgspec

    from cairn.errors import Unverified
    from cairn.trust.nkeyjwt import CredentialError

    try:
        identity = prov.check_kit(creds, roots)
    except CredentialError as exc:
        raise Unverified(exc.message, file=str(creds)) from None

    emit(msgspec.to_builtins(identity), output,
         lambda d: click.echo(f"{creds}: valid {d['kind']} {d['name']}"))
