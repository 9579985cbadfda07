"""`nvflare.app_common.abstract`."""
