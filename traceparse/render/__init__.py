"""Reports built from a store: data first (summary), then renderers (text, JSON)."""
