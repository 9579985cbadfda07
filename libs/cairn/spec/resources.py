"""Resource amounts: the one type is `cairn.events.Resources` (what a role asks for, what a
site has, what a study may use); this module names it for the spec side."""

from __future__ import annotations

from cairn.events.job import Resources

ResourceRequest = Resources
"""The same type under the name the spec modules use; prefer `Resources`."""

ZERO = Resources.zero()
