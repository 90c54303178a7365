"""Self-supervised methods: one small class per method on ``SSLMethod``."""
