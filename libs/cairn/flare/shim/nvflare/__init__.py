"""Cairn's stand-in for NVIDIA FLARE's Client API, on `sys.path` only inside a Cairn worker
whose role says `api: flare` (see `cairn.flare`). It is not NVIDIA FLARE."""
