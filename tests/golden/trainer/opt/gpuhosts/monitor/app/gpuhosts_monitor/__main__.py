# managed by gpuhosts — gpuhosts_monitor/__main__.py of the gpuhosts repository; do not edit on the node
import sys

from gpuhosts_monitor.cli import main

sys.exit(main())
