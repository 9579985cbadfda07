"""`import nvflare.client as flare`: FLARE's Client API, implemented by `cairn.flare.client`."""

from cairn.flare.client import (
    clear,
    get_config,
    get_job_id,
    get_site_name,
    get_task_name,
    init,
    is_evaluate,
    is_running,
    is_submit_model,
    is_train,
    log,
    receive,
    send,
    shutdown,
    system_info,
)
from cairn.flare.model import FLModel, ParamsType

__all__ = ["FLModel", "ParamsType", "clear", "get_config", "get_job_id", "get_site_name",
           "get_task_name", "init", "is_evaluate", "is_running", "is_submit_model",
           "is_train", "log", "receive", "send", "shutdown", "system_info"]
