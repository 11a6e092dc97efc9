"""The top layer: the running service. Config, the component table, assembly, the
pipeline that wires receivers to processors to exporters, and the command line."""
