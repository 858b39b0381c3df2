"""Training monitor web UI for a DFlash drafter training node."""
