"""Signed evidence: Ed25519 keys, DSSE envelopes, in-toto statements, bundles, verification.

    keys         create_key_files, load_signing_key, load_public_key, SigningKey, VerifyingKey
    dsse         sign, add_signature, check_signatures, pae (a stable API; bundles use it too)
    statement    the in-toto Statement v1 with the test-result predicate and Cairn's own
    bundle       build_bundle, cosign_bundle, read_bundle, write_dir, pack, unpack
    trust        load_trust, TrustList, TrustedSigner (roles first-party, site, community)
    verify       verify_bundle -> Verification (every check with its reason; exit_code)
    eligibility  judge: whether evidence makes a site eligible now (pure)
    dashboard    a recipe's evidence status across signers (CONFIRMED ... UNTESTED)
    vsa          build_receipt, verify_receipt: SLSA VSA v1 dispatch receipts
    store        the `evidence` object store and EVIDENCE stream; status: eligibility from the bus
"""
