"""adapter package."""
