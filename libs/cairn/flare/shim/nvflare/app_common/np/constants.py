"""`nvflare.app_common.np.constants`: the numpy examples' names."""

from cairn.flare.model import NPConstants

__all__ = ["NPConstants"]
