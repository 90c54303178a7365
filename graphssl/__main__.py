"""``python -m graphssl``: the same Hydra app as the ``graphssl`` console script."""

from graphssl.cli import main

if __name__ == "__main__":
    main()
