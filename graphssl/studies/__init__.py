"""Studies that reproduce the experiments of the papers graphssl builds on (see STUDIES.md)."""
