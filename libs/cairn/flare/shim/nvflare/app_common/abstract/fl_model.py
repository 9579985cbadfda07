"""`nvflare.app_common.abstract.fl_model`: FLModel and ParamsType (`cairn.flare.model`)."""

from cairn.flare.model import FLModel, FLModelConst, MetaKey, ParamsType

__all__ = ["FLModel", "FLModelConst", "MetaKey", "ParamsType"]
