"""``python -m monarch_launcher``: the ``monarch`` command."""

from .cli import main

if __name__ == "__main__":
    main()
