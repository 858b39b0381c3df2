import sys

from gpuhosts_monitor.cli import main

sys.exit(main())
