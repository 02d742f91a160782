"""portal package."""
