"""Where gpuhosts keeps what it installs on a host or in a container."""

SERVICE_ROOT = "/opt/gpuhosts"
# The scripts gpuhosts ships to run there (a launcher, a gate, a check).
LIB_DIR = "/usr/local/lib/gpuhosts"
