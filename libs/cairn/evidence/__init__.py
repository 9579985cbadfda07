"""Signed evidence: Ed25519 keys, DSSE envelopes, in-toto statements, bundles, verification."""
