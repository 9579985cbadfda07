"""`nvflare.app_common`: the parts FLARE trainers import."""
