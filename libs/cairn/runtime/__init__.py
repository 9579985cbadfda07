"""What runs services: the service runner (`service`), parents forked from one process
(`forked`), the embedded federation of `cairn up` (`embedded`), the private nats-server
(`natsserver`), the context file (`context`), service logs (`logs`) and the federation seed
(`seed`).

Nothing is imported here, so `python -m cairn.runtime._serve` starts a parent without loading
what it does not run.
"""
