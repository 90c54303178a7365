"""graphssl."""
