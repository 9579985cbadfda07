"""Structured logs: `key=value` text for people, one JSON object per line for machines."""

from __future__ import annotations

import json
import logging
import sys
import time


class _Text(logging.Formatter):
    def __init__(self, service: str, site: str) -> None:
        super().__init__()
        self.prefix = f"service={service} site={site}"

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = (f"{stamp}.{int(record.msecs):03d} {record.levelname.lower():5} {self.prefix} "
                f"logger={record.name} {record.getMessage()}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _Json(logging.Formatter):
    def __init__(self, service: str, site: str) -> None:
        super().__init__()
        self.service, self.site = service, site

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname.lower(),
               "service": self.service, "site": self.site, "logger": record.name,
               "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str, fmt: str, service: str, site: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json(service, site) if fmt == "json" else _Text(service, site))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.CRITICAL)
