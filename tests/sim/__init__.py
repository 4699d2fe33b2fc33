"""A deterministic simulation of vsqs clients on one simulated object store."""
