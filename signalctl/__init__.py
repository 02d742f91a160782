"""signalctl package."""
