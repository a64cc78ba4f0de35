import sys

from .cli import main

if __name__ == "__main__":  # reproduce --jobs spawns processes that import this module
    sys.exit(main())
