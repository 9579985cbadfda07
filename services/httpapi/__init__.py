"""The HTTP API service: the federation's reads for one caller's identity, its live events,
its signed requests passed on, and the dashboard (`docs/api.md`, `docs/dashboard.md`)."""
