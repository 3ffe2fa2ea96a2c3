"""Command line of gpuslo: the only package that wires engine, web and probes together."""
