# managed by gpuhosts — gpuhosts_monitor/__init__.py of the gpuhosts repository; do not edit on the node
"""Training monitor web UI for a DFlash drafter training node."""
