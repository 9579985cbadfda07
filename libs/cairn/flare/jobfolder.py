"""`cairn job import-flare DIR`: an exported NVIDIA FLARE job folder as a Cairn job folder.

Read: `meta.json` (name, `min_clients`, `deploy_map`), each app's
`config/config_fed_server.json` and `config/config_fed_client.json` (JSON, format 2) and
its `custom/` code. Mapped:

- the server's FedAvg or ScatterAndGather controller -> role `server` running
  `python -m cairn.flare.server` (Cairn's FedAvg), `num_rounds` -> params `rounds`,
  `min_clients` / `num_clients` -> params `min_sites`, `train_timeout` -> `round_timeout`,
  a numpy model persistor -> params `initial_model` (its `model`, else FLARE's default);
  ScatterAndGather's accumulating weighted aggregator and full-model shareable generator
  are what Cairn's FedAvg does;
- each client app's Client API executor (in-process `ClientAPIExecutor` and its framework
  variants, or a launcher executor with its `SubprocessLauncher` script) -> a role with
  `api: flare` running the app's script with its arguments, at the FLARE sites it is
  deployed to (`@ALL`: every site of the study; `--site FLARE=CAIRN` renames);
- experiment tracking receivers and the plumbing of FLARE's external-process executors
  (pipes, metric relays, configurators): Cairn needs none (metrics are events).

Everything else (other workflows, filters, model selectors, aggregation weights, early
stopping, tasks other than training) is reported as not mapped, each with the file, the
place in it and why.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cairn.errors import InvalidInput
from cairn.names import NAME_RULE

NP_DEFAULT_MODEL = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
CONTROLLERS = {"FedAvg", "PTFedAvg", "BaseFedAvg", "ScatterAndGather"}
EXECUTORS = {"ClientAPIExecutor", "InProcessClientAPIExecutor", "PTInProcessClientAPIExecutor",
             "TFInProcessClientAPIExecutor"}
LAUNCHER_EXECUTORS = {"ClientAPILauncherExecutor", "PTClientAPILauncherExecutor",
                      "TFClientAPILauncherExecutor"}
# Server components that are what Cairn's FedAvg does anyway.
SAME_AS_FEDAVG = {"InTimeAccumulateWeightedAggregator", "FullModelShareableGenerator",
                  "NPModelPersistor"}
NOT_NEEDED = {"TBAnalyticsReceiver", "MLflowReceiver", "WandBReceiver", "ConvertToFedEvent",
              "SubprocessLauncher", "ExternalConfigurator", "MetricRelay", "CellPipe",
              "FilePipe", "TBWriter", "MLflowWriter", "WandBWriter", "AnalyticsSender"}
UNUSED_FEDAVG_ARGS = {"num_clients", "num_rounds", "min_clients", "start_round",
                      "memory_gc_rounds", "persistor_id", "aggregator_id",
                      "shareable_generator_id", "train_task_name", "train_timeout",
                      "task_name", "save_filename", "wait_time_after_min_received",
                      "task_check_period", "persist_every_n_rounds", "snapshot_every_n_rounds",
                      "ignore_result_error", "allow_empty_global_weights",
                      "enable_tensor_disk_offload"}


@dataclass(frozen=True)
class Finding:
    """One FLARE component (or setting) and what became of it."""

    file: str
    where: str
    component: str
    note: str


@dataclass
class Conversion:
    name: str
    spec: dict[str, Any]
    code: dict[str, Path] = field(default_factory=dict)
    """Folder under the Cairn job's `app/` -> the FLARE app's `custom/` folder."""
    mapped: list[Finding] = field(default_factory=list)
    unmapped: list[Finding] = field(default_factory=list)
    pytorch: bool = False
    """A client trainer exchanges PyTorch tensors (a `PT...` executor, or its
    `params_exchange_format: pytorch`): the job's `params_format` says so."""


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        hocon = path.with_suffix(".conf")
        if hocon.is_file():
            raise InvalidInput("FLARE's HOCON configs are not read: export the job with the "
                               "Job API (`export_job`), which writes JSON", file=str(hocon))
        raise InvalidInput("no such file in the FLARE job folder", file=str(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"not JSON: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise InvalidInput("not a JSON object", file=str(path))
    return data


def _list(doc: dict[str, Any], key: str, file: Path) -> list[dict[str, Any]]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InvalidInput("must be a list of objects", file=str(file), field=key)
    return value


def cairn_name(raw: str, what: str, file: str, field_name: str) -> str:
    """A FLARE name made to fit Cairn's name rule (lowercase, dashes)."""
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:63].strip("-")
    if not re.match(NAME_RULE, name):
        raise InvalidInput(f"{raw!r} cannot be made a {what} name", file=file, field=field_name)
    return name


def read_flare_job(folder: Path, site_names: dict[str, str] | None = None) -> Conversion:
    """Read an exported FLARE job folder and say what it becomes.

    Raises:
        InvalidInput: a missing or malformed file, naming it and the field.
    """
    renames = site_names or {}
    meta_file = folder / "meta.json"
    meta = _json(meta_file)
    raw_name = meta.get("name") or folder.name
    if not isinstance(raw_name, str):
        raise InvalidInput("must be a string", file=str(meta_file), field="name")
    deploy = meta.get("deploy_map")
    if not isinstance(deploy, dict) or not deploy:
        raise InvalidInput("must map each app folder to its sites", file=str(meta_file),
                           field="deploy_map")
    for app, targets in deploy.items():
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", app) or app.startswith(".."):
            raise InvalidInput(f"app {app!r} is not a folder name of the job", file=str(meta_file),
                               field="deploy_map")
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise InvalidInput("must be a list of site names", file=str(meta_file),
                               field=f"deploy_map.{app}")
    conv = Conversion(name=cairn_name(raw_name, "job", str(meta_file), "name"), spec={})
    params: dict[str, Any] = {}
    min_clients = meta.get("min_clients")
    roles: dict[str, dict[str, Any]] = {}
    servers = [a for a, targets in deploy.items() if "server" in (targets or [])
               or "@ALL" in (targets or [])]
    clients = {a: [t for t in (targets or []) if t != "server"] for a, targets in deploy.items()}
    clients = {a: t for a, t in clients.items() if t}
    for app in servers:
        server_file = folder / app / "config" / "config_fed_server.json"
        _shaped(server_file, _server, server_file, conv, params)
    if "rounds" not in params:
        raise InvalidInput("no FedAvg or ScatterAndGather controller on the server: nothing to "
                           "run (see the findings)", file=str(meta_file), field="deploy_map")
    if isinstance(min_clients, int) and min_clients > 0 and "min_sites" not in params:
        params["min_sites"] = min_clients
    for app, targets in clients.items():
        app_dir = folder / app
        role = "client" if len(clients) == 1 else cairn_name(
            "client-" + app.removeprefix("app_").removeprefix("app"), "role",
            str(meta_file), f"deploy_map.{app}")
        client_file = app_dir / "config" / "config_fed_client.json"
        script = _shaped(client_file, _client, client_file, app_dir, conv, app)
        if script is None:
            continue
        entry: dict[str, Any] = {"api": "flare", "entrypoint": script,
                                 "resources": {"cpus": 1, "memory": "1Gi"}}
        if "@ALL" in targets:
            entry["sites"] = "all"
            if "min_sites" in params:
                entry["min_sites"] = params["min_sites"]
        else:
            entry["sites"] = [cairn_name(renames.get(t, t), "site", str(meta_file),
                                         f"deploy_map.{app}") for t in targets]
        roles[role] = entry
    if not roles:
        raise InvalidInput("no client app with a Client API trainer: nothing to run",
                           file=str(meta_file), field="deploy_map")
    if conv.pytorch:
        params["params_format"] = "pytorch"
    conv.spec = {
        "name": conv.name, "code": "./app",
        "roles": {"server": {"entrypoint": "python -m cairn.flare.server",
                             "resources": {"cpus": 1, "memory": "1Gi"}}, **roles},
        "params": params, "timeout": "1h", "end_grace": "60s"}
    return conv


T = TypeVar("T")


def _shaped(file: Path, read: Callable[..., T], *args: Any) -> T:
    """`read(*args)`, with a value of the wrong shape anywhere in `file` (an object where a
    list belongs, ...) one error naming the file rather than a traceback."""
    try:
        return read(*args)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        raise InvalidInput(f"not a FLARE config this reads ({type(exc).__name__}: {exc})",
                           file=str(file)) from None


def _count(args: dict[str, Any], key: str, default: int, file: Path, where: str) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{value!r} is not a positive whole number", file=str(file),
                           field=f"{where}.args.{key}")
    return value


def _server(file: Path, conv: Conversion, params: dict[str, Any]) -> None:
    doc = _json(file)
    components = {c.get("id"): c for c in _list(doc, "components", file)}
    used: set[Any] = set()
    for i, wf in enumerate(_list(doc, "workflows", file)):
        path = str(wf.get("path") or wf.get("name") or "?")
        where = f"workflows[{i}] ({wf.get('id', '?')})"
        args = wf.get("args") or {}
        if _short(path) not in CONTROLLERS or "rounds" in params:
            why = ("a second controller: Cairn runs one FedAvg" if "rounds" in params else
                   "no Cairn workflow for it here (FedAvg and ScatterAndGather map)")
            conv.unmapped.append(Finding(str(file), where, path, why))
            continue
        if not isinstance(args, dict):
            raise InvalidInput("must be an object", file=str(file), field=f"{where}.args")
        params["rounds"] = _count(args, "num_rounds", 5, file, where)
        for key in ("min_clients", "num_clients"):
            if key in args:
                params["min_sites"] = _count(args, key, 1, file, where)
                break
        if args.get("train_timeout"):
            params["round_timeout"] = _count(args, "train_timeout", 0, file, where)
        conv.mapped.append(Finding(str(file), where, path, "role server: Cairn's FedAvg "
                                   f"(rounds {params['rounds']})"))
        for key, value in args.items():
            if key.endswith("_id") and value in components:
                used.add(value)
                _server_component(file, components[value], conv, params, f"{where}.{key}")
            elif key == "model" and isinstance(value, dict) and "path" not in value:
                params["initial_model"] = value
            elif key == "aggregation_weights" and not value:
                continue
            elif key not in UNUSED_FEDAVG_ARGS:
                conv.unmapped.append(Finding(str(file), f"{where}.args.{key}", path,
                                             f"setting {key} has no counterpart in Cairn's "
                                             "FedAvg"))
    for cid, comp in components.items():
        if cid not in used:
            _server_component(file, comp, conv, params, f"components ({cid})")
    _filters(file, doc, conv)


def _server_component(file: Path, comp: dict[str, Any], conv: Conversion,
                      params: dict[str, Any], where: str) -> None:
    path = str(comp.get("path") or comp.get("name") or "?")
    short = _short(path)
    if short == "NPModelPersistor":
        model = (comp.get("args") or {}).get("model") or NP_DEFAULT_MODEL
        params["initial_model"] = {"numpy_key": model}
        conv.mapped.append(Finding(str(file), where, path, "params initial_model"))
    elif short in SAME_AS_FEDAVG or short in NOT_NEEDED:
        conv.mapped.append(Finding(str(file), where, path, "what Cairn does already"))
    else:
        conv.unmapped.append(Finding(str(file), where, path, "no Cairn counterpart"))


def _filters(file: Path, doc: dict[str, Any], conv: Conversion) -> None:
    for key in ("task_data_filters", "task_result_filters"):
        for i, f in enumerate(_list(doc, key, file)):
            for j, flt in enumerate(f.get("filters") or []):
                path = str((flt or {}).get("path") or (flt or {}).get("name") or "?")
                conv.unmapped.append(Finding(
                    str(file), f"{key}[{i}].filters[{j}]", path,
                    "filters are not mapped (a site's privacy rules are its own)"))


def _client(file: Path, app_dir: Path, conv: Conversion, app: str) -> str | None:
    """The role's entrypoint for the app's trainer, or None when it has none to run."""
    doc = _json(file)
    components = {c.get("id"): c for c in _list(doc, "components", file)}
    entry: str | None = None
    for i, ex in enumerate(_list(doc, "executors", file)):
        executor = ex.get("executor") or {}
        path = str(executor.get("path") or executor.get("name") or "?")
        args = executor.get("args") or {}
        where = f"executors[{i}]"
        tasks = ex.get("tasks") or []
        if not ({"*", "train"} & set(tasks)):
            conv.unmapped.append(Finding(str(file), where, path, f"tasks {tasks}: only "
                                         "training maps (Cairn's FedAvg sends train tasks)"))
            continue
        if _short(path) in EXECUTORS:
            script, script_args = str(args.get("task_script_path", "")), str(
                args.get("task_script_args", ""))
        elif _short(path) in LAUNCHER_EXECUTORS and args.get("launcher_id") in components:
            launcher = components[args["launcher_id"]].get("args") or {}
            words = shlex.split(str(launcher.get("script", "")))
            words = [w for w in words if not w.startswith("python") and w != "-u"]
            script = words[0] if words else ""
            script_args = shlex.join(words[1:])
        else:
            conv.unmapped.append(Finding(str(file), where, path, "not a Client API executor"))
            continue
        rel = _script_in(app_dir, script, file, where)
        if _short(path).startswith("PT") or args.get("params_exchange_format") == "pytorch":
            conv.pytorch = True
        conv.code[app] = app_dir / "custom"
        entry = f"python {shlex.quote(f'{app}/{rel}')} {script_args}".strip()
        conv.mapped.append(Finding(str(file), where, path,
                                   f"a role with api: flare: {entry}"))
    for cid, comp in components.items():
        path = str(comp.get("path") or "?")
        if _short(path) in NOT_NEEDED:
            conv.mapped.append(Finding(str(file), f"components ({cid})", path,
                                       "not needed on Cairn"))
        else:
            conv.unmapped.append(Finding(str(file), f"components ({cid})", path,
                                         "no Cairn counterpart"))
    _filters(file, doc, conv)
    return entry


def _script_in(app_dir: Path, script: str, file: Path, where: str) -> str:
    """The trainer's path inside the app's `custom/` folder (FLARE copies it there)."""
    custom = app_dir / "custom"
    if not script:
        raise InvalidInput("the executor names no training script", file=str(file),
                           field=where)
    given = Path(script)
    parts = given.parts[given.parts.index("custom") + 1:] if "custom" in given.parts else ()
    for candidate in (given, Path(*parts) if parts else None, Path(given.name)):
        if (candidate is not None and not candidate.is_absolute()
                and (custom / candidate).is_file()):
            return candidate.as_posix()
    raise InvalidInput(f"training script {script!r} is not in {custom}", file=str(file),
                       field=where)


def write_cairn_job(conv: Conversion, out: Path, source: Path) -> list[Path]:
    """Write `out/job.yaml` and `out/app/<app>/` (each client app's code); `out` must be
    new or empty.

    Raises:
        InvalidInput: `out` exists and is not empty.
    """
    import yaml

    if out.exists() and any(out.iterdir()):
        raise InvalidInput(f"{out} exists and is not empty: give a new --out", field="--out")
    (out / "app").mkdir(parents=True, exist_ok=True)
    written = []
    for app, custom in conv.code.items():
        shutil.copytree(custom, out / "app" / app, dirs_exist_ok=True)
        written.append(out / "app" / app)
    header = [f"# Converted by `cairn job import-flare` from the FLARE job in {source}."]
    header += [f"# Not mapped: {f.component} at {Path(f.file).name} {f.where}: {f.note}"
               for f in conv.unmapped]
    body = yaml.safe_dump(conv.spec, sort_keys=False, default_flow_style=None)
    (out / "job.yaml").write_text("\n".join(header) + "\n" + body, encoding="utf-8")
    return [out / "job.yaml", *written]
