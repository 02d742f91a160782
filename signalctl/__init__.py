"""signalctl: the operator's command line for Project Signal (and the local demo)."""
