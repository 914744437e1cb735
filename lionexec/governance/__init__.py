"""Layer package; its public names are exported as they land."""
