"""Stand-in for the sglang package on a simulated host (see ../README.md)."""
