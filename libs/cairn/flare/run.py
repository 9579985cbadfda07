"""`python -m cairn.flare.run SCRIPT [ARGS]` (or `-m MODULE [ARGS]`): a FLARE trainer as a
Cairn worker.

What a role with `api: flare` runs (the job spec rewrites its entrypoint to this). The
script runs as `python SCRIPT ARGS` would run it (`__main__`, its folder first on
`sys.path`, `sys.argv` its own), with one difference: `nvflare` imports Cairn's Client API
(`shim/nvflare`, just after the script's folder, so it wins over any `nvflare` installed
in the worker's Python). When the script ends, its Client API session is closed and the
worker exits with the script's status.
"""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "shim"
USAGE = "usage: python -m cairn.flare.run SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def run(argv: list[str]) -> int:
    """Run the trainer named by `argv`; returns its exit status."""
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    module = argv[1] if argv[0] == "-m" else None
    if module is None:
        script = Path(argv[0])
        if not script.is_file():
            print(f"cairn.flare.run: {argv[0]}: no such script in the job's code",
                  file=sys.stderr)
            return 2
        sys.argv = [str(script), *argv[1:]]
        sys.path[0:1] = [str(script.resolve().parent), str(SHIM)]
    else:
        sys.argv = [module, *argv[2:]]
        sys.path[0:1] = [str(Path.cwd()), str(SHIM)]
    code = 0
    try:
        if module is None:
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except Exception:
        traceback.print_exc()
        code = 1
    finally:
        from cairn.flare import client

        client.shutdown()
    return code


def main() -> None:
    from cairn.worker.sdk import _exit_now

    _exit_now(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
