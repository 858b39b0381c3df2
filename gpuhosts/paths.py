"""Where gpuhosts keeps what it installs on a host or in a container."""

SERVICE_ROOT = "/opt/gpuhosts"
