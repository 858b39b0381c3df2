"""Pure plans of every unit: typed settings in, units (scripts, probes, facts) out; no Pulumi here."""
