"""The signer service: turns finished validation runs into signed evidence bundles."""
