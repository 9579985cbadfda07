"""Cairn: federated jobs across independent sites, verified sites, one event log."""

__version__ = "0.1.0"
