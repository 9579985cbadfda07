"""`nvflare.app_common.np`."""
