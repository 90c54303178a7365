"""Self-supervised methods: one small class per method on :class:`~graphssl.methods.base.SSLMethod`."""
