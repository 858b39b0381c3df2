"""gpuhosts: typed stack config, offline plan and command-line interface."""
